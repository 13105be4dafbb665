/* test_status.c - col_err's record of the settings an error is about
 * (status.h): a new message names none, col_err_set_on marks one,
 * col_err_add_setting another, wrapping (col_err_prefix) and copying
 * (col_err_copy) keep them, and every setting has a name in the library's
 * words. */
#include <string.h>

#include "status.h"
#include "testlib.h"

static void test_set_and_mark(void)
{
    col_err e = {0};
    TL_OK(col_err_set_on(&e, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM, "the compute tier budget of %d MiB is too small",
                         2) == COL_ENOMEM && e.code == COL_ENOMEM &&
              strcmp(e.msg, "the compute tier budget of 2 MiB is too small") == 0,
          "col_err_set_on records the code and the message: %s", e.msg);
    TL_OK(col_err_has_setting(&e, COL_SETTING_COMPUTE_BUDGET) && e.settings == 1u << COL_SETTING_COMPUTE_BUDGET,
          "col_err_set_on marks just its setting (0x%x)", e.settings);
    col_err_add_setting(&e, COL_SETTING_HOST_BUDGET);
    TL_OK(col_err_has_setting(&e, COL_SETTING_HOST_BUDGET) && col_err_has_setting(&e, COL_SETTING_COMPUTE_BUDGET) &&
              !col_err_has_setting(&e, COL_SETTING_NVME_DIR),
          "col_err_add_setting marks one more");
    col_err_add_setting(&e, COL_SETTING_NONE);
    col_err_add_setting(&e, COL_NSETTINGS);
    col_err_add_setting(&e, (col_setting)-1);
    TL_OK(e.settings == ((1u << COL_SETTING_COMPUTE_BUDGET) | (1u << COL_SETTING_HOST_BUDGET)) &&
              !col_err_has_setting(&e, COL_SETTING_NONE) && !col_err_has_setting(&e, COL_NSETTINGS),
          "NONE and out-of-range settings are neither marked nor reported");
    col_err_set(&e, COL_EIO, "another failure: %s", e.msg);
    TL_OK(e.settings == 0 && e.code == COL_EIO &&
              strcmp(e.msg, "another failure: the compute tier budget of 2 MiB is too small") == 0,
          "a new message names no setting (no stale hint): %s", e.msg);
    col_err_set_on(&e, COL_SETTING_NVME_DIR, COL_EIO, "x");
    col_err_clear(&e);
    TL_OK(e.code == COL_OK && e.msg[0] == '\0' && e.settings == 0, "col_err_clear forgets the settings");
    TL_OK(col_err_set_on(NULL, COL_SETTING_OUTPUT_DIR, COL_EIO, "no record") == COL_EIO &&
              !col_err_has_setting(NULL, COL_SETTING_OUTPUT_DIR),
          "a NULL record is allowed");
    col_err_add_setting(NULL, COL_SETTING_OUTPUT_DIR);
}

static void test_prefix_and_copy(void)
{
    col_err e = {0}, d = {0};
    col_err_set_on(&e, COL_SETTING_NVME_MAX, COL_ENOMEM, "the size limit is reached");
    TL_OK(col_err_prefix(&e, "chunk %d", 7) == COL_ENOMEM && strcmp(e.msg, "chunk 7: the size limit is reached") == 0 &&
              e.code == COL_ENOMEM && col_err_has_setting(&e, COL_SETTING_NVME_MAX),
          "col_err_prefix puts context first and keeps the code and the setting: %s", e.msg);
    TL_OK(col_err_copy(&d, &e) == COL_ENOMEM && d.code == COL_ENOMEM && strcmp(d.msg, e.msg) == 0 &&
              d.settings == e.settings,
          "col_err_copy carries code, message and settings");
    TL_OK(col_err_copy(NULL, &e) == COL_ENOMEM && col_err_prefix(NULL, "x") == COL_OK, "NULL records are allowed");
    char big[COL_ERR_MSG_MAX + 64];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    col_err_prefix(&e, "%s", big);
    TL_OK(strlen(e.msg) == COL_ERR_MSG_MAX - 1 && col_err_has_setting(&e, COL_SETTING_NVME_MAX),
          "an overlong prefix is cut at the message size");
}

static void test_names(void)
{
    bool ok = true;
    for (int s = COL_SETTING_NONE + 1; s < COL_NSETTINGS; s++) {
        const char *n = col_setting_name((col_setting)s);
        ok &= n && *n && strcmp(n, "unknown setting") != 0 && strcmp(n, "none") != 0 && !strstr(n, "--");
        for (int t = COL_SETTING_NONE + 1; t < s; t++)
            ok &= strcmp(n, col_setting_name((col_setting)t)) != 0;
    }
    TL_OK(ok, "every setting has its own name in the library's words");
    TL_OK(strcmp(col_setting_name(COL_SETTING_COMPUTE_BUDGET), "compute tier budget") == 0 &&
              strcmp(col_setting_name(COL_NSETTINGS), "unknown setting") == 0,
          "names: %s, %s", col_setting_name(COL_SETTING_COMPUTE_BUDGET), col_setting_name(COL_NSETTINGS));
    TL_OK(COL_NSETTINGS <= 32, "the settings fit col_err.settings (%d)", COL_NSETTINGS);
}

int main(void)
{
    test_set_and_mark();
    test_prefix_and_copy();
    test_names();
    return tl_done();
}
