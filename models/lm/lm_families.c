/* lm_families.c - the registry of model families (lm_family.h): the one
 * list of them. A new family is a file defining its col_lm_family, a
 * col_arch value in lm.h and a line here. */
#include "lm_family.h"

#include <ctype.h>
#include <string.h>

const col_lm_family *const col_lm_families[] = {&col_gpt2_family, &col_opt_family, &col_llama_family, NULL};

const col_lm_family *col_lm_family_of(col_arch arch)
{
    for (int i = 0; col_lm_families[i]; i++)
        if (col_lm_families[i]->arch == arch)
            return col_lm_families[i];
    return NULL;
}

/* whether name (from its start) is exactly pattern, '#' matching one or more digits */
static bool match_here(const char *name, const char *pat)
{
    for (; *pat; pat++) {
        if (*pat == '#') {
            if (!isdigit((unsigned char)*name))
                return false;
            while (isdigit((unsigned char)*name))
                name++;
        } else if (*name++ != *pat) {
            return false;
        }
    }
    return *name == 0;
}

bool col_lm_unused_ok(const col_lm_family *f, const char *name)
{
    for (int i = 0; f && f->unused_ok && f->unused_ok[i]; i++) {
        if (match_here(name, f->unused_ok[i]))
            return true;
        for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.'))
            if (match_here(dot + 1, f->unused_ok[i]))
                return true;
    }
    return false;
}
