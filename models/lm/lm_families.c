/* lm_families.c - the registry of model families (lm_family.h): the one
 * list of them. A new family is a file defining its col_lm_family, a
 * col_arch value in lm.h and a line here. */
#include "lm_family.h"

const col_lm_family *const col_lm_families[] = {&col_gpt2_family, &col_opt_family, &col_llama_family, NULL};

const col_lm_family *col_lm_family_of(col_arch arch)
{
    for (int i = 0; col_lm_families[i]; i++)
        if (col_lm_families[i]->arch == arch)
            return col_lm_families[i];
    return NULL;
}
