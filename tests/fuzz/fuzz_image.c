/* fuzz_image.c - libFuzzer harness for the image readers (libcore/formats/image.c).
 *
 * The readers take a path, so each input is written to one scratch file (made once, in TMPDIR) and read as
 * stored, as gray, as RGB and as RGBA, and its "parameters" text chunk looked up. Any crash, leak, UB or hang
 * is a bug in image.c's use of libpng or libjpeg (their errors must come back as one message, never a print
 * or an exit). A read that succeeds must give a size within the limit and the channels asked for. Seeds:
 * tests/fuzz/corpus_image/ (a PNG with a text chunk, a gray PNG, an RGB and a gray JPEG). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image.h"

static char path[256];

static void check_err(const col_err *e)
{
    if (e->code == COL_OK || !memchr(e->msg, '\0', sizeof e->msg) || strchr(e->msg, '\n'))
        abort(); /* a failure must give one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/fuzz_image_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(path);
        if (fd < 0)
            abort();
        close(fd);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    static const int want[] = {0, 1, 3, 4};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        col_image img = {0};
        col_err err = {0};
        if (col_image_read(path, want[w], &img, &err) != COL_OK) {
            check_err(&err);
            continue;
        }
        if (img.width <= 0 || img.height <= 0 || !img.data ||
            (int64_t)img.width * img.height > (int64_t)COL_IMAGE_MAX_PIXELS ||
            (want[w] && img.channels != want[w]) || (img.channels != 1 && img.channels != 3 && img.channels != 4))
            abort();
        /* every byte readable */
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < (size_t)img.width * img.height * (size_t)img.channels; i++)
            sum += img.data[i];
        col_image_free(&img);
    }
    char *value = NULL;
    col_err err = {0};
    if (col_image_read_text(path, "parameters", &value, &err) == COL_OK) {
        if (!value)
            abort();
        free(value);
    } else {
        check_err(&err);
    }
    return 0;
}
