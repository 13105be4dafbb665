/* test_rlhf_data.c - stub */
#include "rlhf_data.h"
#include "testlib.h"
int main(void)
{
    TL_OK(col_rl_kind_name(COL_RL_PAIRS) != NULL, "kind name");
    return tl_done();
}
