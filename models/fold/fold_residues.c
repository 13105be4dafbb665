/* fold_residues.c - lookups into AlphaFold's residue tables (fold_residues.h;
 * the tables themselves are generated into fold_residue_tables.c). */
#include "fold_residues.h"

#include <string.h>

int fold_restype_of_letter(char c)
{
    if (c < 'A' || c > 'Z')
        return -1;
    for (int i = 0; i < FOLD_NUM_AA; i++)
        if (fold_restype_letters[i] == c)
            return i;
    return FOLD_RESTYPE_X;
}

int fold_restype_of_name3(const char *name3)
{
    if (!name3)
        return -1;
    for (int i = 0; i < FOLD_NUM_RESTYPES; i++)
        if (strcmp(fold_restype_names3[i], name3) == 0)
            return i;
    return -1;
}

int fold_atom37_index(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < FOLD_NUM_ATOM37; i++)
        if (strcmp(fold_atom37_names[i], name) == 0)
            return i;
    return -1;
}
