/* fuzz_outdir_manifest.c - .colossal-manifest decides which files colossal
 * may unlink in an output directory, and anyone may edit it: parsing it must
 * never crash or leak, and no name it accepts may reach outside the
 * directory (a '/', "." or ".."), be empty or hold a line break. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outdir_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    od_manifest m;
    col_err err = {0};
    if (od_manifest_parse((const char *)data, size, ".colossal-manifest", &m, &err) == COL_OK) {
        if (!m.present || (m.staging && m.n != 0))
            abort();
        for (size_t i = 0; i < m.n; i++) {
            const char *s = m.names[i];
            if (!s[0] || strchr(s, '/') || strchr(s, '\n') || !strcmp(s, ".") || !strcmp(s, "..") ||
                !od_manifest_lists(&m, s))
                abort();
        }
    } else if (m.names || m.text || !err.msg[0]) {
        abort();
    }
    od_manifest_free(&m);
    return 0;
}
