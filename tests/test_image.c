/* test_image.c - libcore/formats/image: PNG/JPEG reading against files
 * written here with libpng and libjpeg themselves (the reference writers),
 * PNG writing and its text chunks, and hostile files. */
#include <dirent.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "image.h"
#include "testlib.h"
#include "textio.h"

static char dir[256];

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static uint32_t rng_state = 12345;
static uint8_t rnd8(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (uint8_t)(rng_state >> 24);
}

static bool one_line(const col_err *e)
{
    return e->msg[0] != '\0' && strchr(e->msg, '\n') == NULL;
}

static void put_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* ---- the reference writers: libpng and libjpeg used directly ---- */

typedef struct {
    int w, h, color_type, bit_depth, interlace;
    const uint8_t *rows; /* packed in the file's own layout (16-bit big-endian) */
    size_t stride;
    const png_color *palette;
    int npalette;
    const uint8_t *trns;
    int ntrns;
    const char *end_key, *end_text; /* a tEXt chunk after the pixels */
} ref_png;

static bool ref_write_png(const char *path, const ref_png *r)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_infop end = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return false;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, r->w, r->h, r->bit_depth, r->color_type, r->interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (r->palette)
        png_set_PLTE(png, info, r->palette, r->npalette);
    if (r->trns)
        png_set_tRNS(png, info, r->trns, r->ntrns, NULL);
    png_write_info(png, info);
    png_bytep *rows = malloc(sizeof(png_bytep) * r->h);
    for (int y = 0; y < r->h; y++)
        rows[y] = (png_bytep)r->rows + y * r->stride;
    png_write_image(png, rows);
    if (r->end_key) {
        png_text t = {.compression = PNG_TEXT_COMPRESSION_NONE, .key = (char *)r->end_key,
                      .text = (char *)r->end_text, .text_length = strlen(r->end_text)};
        png_set_text(png, end, &t, 1);
    }
    png_write_end(png, end);
    png_destroy_info_struct(png, &end);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return fclose(f) == 0;
}

/* comps 1 (gray), 3 (RGB, no chroma subsampling) or 4 (CMYK) */
static bool ref_write_jpeg(const char *path, const uint8_t *px, int w, int h, int comps, int quality)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w;
    c.image_height = h;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (comps == 3)
        for (int i = 0; i < 3; i++)
            c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f) == 0;
}

/* ---- round trips through col_image_write_png ---- */

static void test_round_trips(void)
{
    static const int sizes[][2] = {{1, 1}, {3, 7}, {300, 2}, {2, 300}};
    static const int chans[] = {1, 3, 4};
    for (int ci = 0; ci < 3; ci++) {
        for (int si = 0; si < 4; si++) {
            col_image img = {sizes[si][0], sizes[si][1], chans[ci], NULL};
            size_t n = (size_t)img.width * img.height * img.channels;
            img.data = malloc(n);
            for (size_t i = 0; i < n; i++)
                img.data[i] = rnd8();
            col_err err = {0};
            const char *p = tpath("rt.png");
            col_status st = col_image_write_png(p, &img, NULL, &err);
            col_image back = {0};
            if (st == COL_OK)
                st = col_image_read(p, 0, &back, &err);
            TL_OK(st == COL_OK && back.width == img.width && back.height == img.height &&
                      back.channels == img.channels && memcmp(back.data, img.data, n) == 0,
                  "round trip %dx%d, %d channels: %s", img.width, img.height, img.channels,
                  st == COL_OK ? "same pixels" : err.msg);
            col_image_free(&back);
            free(img.data);
        }
    }
}

static void test_text(void)
{
    uint8_t px[4 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    col_image img = {2, 2, 3, px};
    const char *params = "a photo of a cat\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, CFG scale: 7, Seed: 42";
    const char *utf8 = "caf\xc3\xa9 \xe2\x98\x95 \xe6\x97\xa5\xe6\x9c\xac";
    const char *text[] = {"parameters", params, "Comment", utf8, "Empty", "", NULL};
    col_err err = {0};
    const char *p = tpath("text.png");
    col_status st = col_image_write_png(p, &img, text, &err);
    TL_OK(st == COL_OK, "write with text chunks: %s", st == COL_OK ? "ok" : err.msg);
    for (int i = 0; text[2 * i]; i++) {
        char *v = NULL;
        st = col_image_read_text(p, text[2 * i], &v, &err);
        TL_OK(st == COL_OK && strcmp(v, text[2 * i + 1]) == 0, "text \"%s\" read back: %s", text[2 * i],
              st == COL_OK ? "same" : err.msg);
        free(v);
    }
    /* the UTF-8 value is in an iTXt chunk, the ASCII one in tEXt: libpng says which */
    FILE *f = fopen(p, "rb");
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    int ok_kinds = 0;
    if (!setjmp(png_jmpbuf(png))) {
        png_init_io(png, f);
        png_read_info(png, info);
        png_textp t;
        int n = png_get_text(png, info, &t, NULL);
        for (int i = 0; i < n; i++) {
            if (!strcmp(t[i].key, "parameters") && t[i].compression == PNG_TEXT_COMPRESSION_NONE)
                ok_kinds++;
            if (!strcmp(t[i].key, "Comment") && t[i].compression == PNG_ITXT_COMPRESSION_NONE)
                ok_kinds++;
        }
    }
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    TL_OK(ok_kinds == 2, "ASCII value in tEXt, UTF-8 value in iTXt (libpng reads them so)");
    char *v = NULL;
    st = col_image_read_text(p, "nosuchkey", &v, &err);
    TL_OK(st == COL_EFORMAT && v == NULL && one_line(&err), "absent key: %s", err.msg);

    /* a text chunk after the pixels (other writers put them there) */
    uint8_t rows[5 * 4 * 3];
    for (size_t i = 0; i < sizeof rows; i++)
        rows[i] = rnd8();
    ref_png r = {.w = 4, .h = 5, .color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 8, .interlace = PNG_INTERLACE_ADAM7,
                 .rows = rows, .stride = 12, .end_key = "parameters", .end_text = params};
    p = tpath("endtext.png");
    ref_write_png(p, &r);
    st = col_image_read_text(p, "parameters", &v, &err);
    TL_OK(st == COL_OK && strcmp(v, params) == 0, "text chunk after the pixels: %s", st == COL_OK ? "found" : err.msg);
    free(v);

    const char *bad_key[] = {"", "x", NULL};
    st = col_image_write_png(tpath("badkey.png"), &img, bad_key, &err);
    TL_OK(st == COL_EINVAL && one_line(&err), "empty key refused: %s", err.msg);
    const char *bad_val[] = {"k", "\xff\xfe", NULL};
    st = col_image_write_png(tpath("badval.png"), &img, bad_val, &err);
    TL_OK(st == COL_EINVAL && one_line(&err) && access(tpath("badval.png"), F_OK) != 0, "invalid UTF-8 refused: %s",
          err.msg);
}

/* ---- PNGs of other kinds, written by libpng; expected pixels computed here ---- */

static void check_read(const char *what, const char *path, int want, int w, int h, int ch, const uint8_t *expect)
{
    col_image img = {0};
    col_err err = {0};
    col_status st = col_image_read(path, want, &img, &err);
    size_t n = (size_t)w * h * ch, bad = 0;
    if (st == COL_OK && img.width == w && img.height == h && img.channels == ch)
        for (size_t i = 0; i < n; i++)
            bad += img.data[i] != expect[i];
    TL_OK(st == COL_OK && img.width == w && img.height == h && img.channels == ch && bad == 0,
          "%s (want %d): %s%s, %zu of %zu samples differ", what, want, st == COL_OK ? "" : err.msg,
          st == COL_OK ? "read" : "", bad, n);
    col_image_free(&img);
}

static void test_png_kinds(void)
{
    enum { W = 13, H = 11 };
    /* 16-bit RGB: 8 bits by rounding v * 255 / 65535 */
    {
        uint8_t rows[H * W * 6], ex[H * W * 3];
        for (int i = 0; i < H * W * 3; i++) {
            unsigned v = (unsigned)rnd8() << 8 | rnd8();
            rows[2 * i] = v >> 8;
            rows[2 * i + 1] = v & 0xff;
            ex[i] = (uint8_t)((v * 255u + 32767u) / 65535u);
        }
        ref_png r = {W, H, PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, rows, W * 6};
        ref_write_png(tpath("rgb16.png"), &r);
        check_read("16-bit RGB", tpath("rgb16.png"), 0, W, H, 3, ex);
    }
    /* palette with transparency for the first entries */
    {
        png_color pal[5];
        uint8_t trns[3] = {0, 100, 200};
        for (int i = 0; i < 5; i++)
            pal[i] = (png_color){rnd8(), rnd8(), rnd8()};
        uint8_t rows[H * W], ex4[H * W * 4], ex3[H * W * 3];
        for (int i = 0; i < H * W; i++) {
            int k = rnd8() % 5;
            rows[i] = k;
            uint8_t c[4] = {pal[k].red, pal[k].green, pal[k].blue, k < 3 ? trns[k] : 255};
            memcpy(ex4 + 4 * i, c, 4);
            memcpy(ex3 + 3 * i, c, 3);
        }
        ref_png r = {W, H, PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, rows, W, pal, 5, trns, 3};
        ref_write_png(tpath("pal.png"), &r);
        check_read("palette with tRNS", tpath("pal.png"), 0, W, H, 4, ex4);
        check_read("palette with tRNS", tpath("pal.png"), 3, W, H, 3, ex3);
    }
    /* gray + alpha: RGBA as stored, alpha dropped for gray */
    {
        uint8_t rows[H * W * 2], ex4[H * W * 4], ex1[H * W];
        for (int i = 0; i < H * W; i++) {
            rows[2 * i] = rnd8();
            rows[2 * i + 1] = rnd8();
            uint8_t c[4] = {rows[2 * i], rows[2 * i], rows[2 * i], rows[2 * i + 1]};
            memcpy(ex4 + 4 * i, c, 4);
            ex1[i] = rows[2 * i];
        }
        ref_png r = {W, H, PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE, rows, W * 2};
        ref_write_png(tpath("ga.png"), &r);
        check_read("gray+alpha", tpath("ga.png"), 0, W, H, 4, ex4);
        check_read("gray+alpha", tpath("ga.png"), 1, W, H, 1, ex1);
    }
    /* interlaced RGBA, and gray expanded to RGB */
    {
        uint8_t rows[H * W * 4];
        for (int i = 0; i < H * W * 4; i++)
            rows[i] = rnd8();
        ref_png r = {W, H, PNG_COLOR_TYPE_RGBA, 8, PNG_INTERLACE_ADAM7, rows, W * 4};
        ref_write_png(tpath("adam7.png"), &r);
        check_read("interlaced RGBA", tpath("adam7.png"), 0, W, H, 4, rows);
        uint8_t gray[H * W], ex3[H * W * 3];
        for (int i = 0; i < H * W; i++) {
            gray[i] = rnd8();
            memset(ex3 + 3 * i, gray[i], 3);
        }
        ref_png g = {W, H, PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_ADAM7, gray, W};
        ref_write_png(tpath("gray.png"), &g);
        check_read("interlaced gray", tpath("gray.png"), 3, W, H, 3, ex3);
        uint8_t ex4[H * W * 4];
        for (int i = 0; i < H * W; i++) {
            memset(ex4 + 4 * i, gray[i], 3);
            ex4[4 * i + 3] = 255;
        }
        check_read("interlaced gray", tpath("gray.png"), 4, W, H, 4, ex4);
    }
    /* 1-bit gray: 0 and 255 */
    {
        uint8_t rows[H * 2], ex[H * W];
        memset(rows, 0, sizeof rows);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int b = rnd8() & 1;
                rows[y * 2 + x / 8] |= b << (7 - x % 8);
                ex[y * W + x] = b ? 255 : 0;
            }
        ref_png r = {W, H, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, rows, 2};
        ref_write_png(tpath("gray1.png"), &r);
        check_read("1-bit gray", tpath("gray1.png"), 0, W, H, 1, ex);
    }
}

/* ---- JPEG ---- */

static void test_jpeg(void)
{
    enum { W = 24, H = 17 };
    uint8_t rgb[H * W * 3], gray[H * W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = rgb + 3 * (y * W + x);
            p[0] = (uint8_t)(x * 10);
            p[1] = (uint8_t)(y * 14);
            p[2] = (uint8_t)(128 + 3 * (x - y));
            gray[y * W + x] = (uint8_t)(5 * x + 7 * y);
        }
    const char *p = tpath("rgb.jpg");
    ref_write_jpeg(p, rgb, W, H, 3, 100);
    col_image img = {0};
    col_err err = {0};
    col_status st = col_image_read(p, 0, &img, &err);
    int maxd = 0;
    if (st == COL_OK && img.channels == 3 && img.width == W && img.height == H)
        for (int i = 0; i < W * H * 3; i++)
            maxd = abs((int)img.data[i] - rgb[i]) > maxd ? abs((int)img.data[i] - rgb[i]) : maxd;
    TL_OK(st == COL_OK && img.channels == 3 && img.width == W && img.height == H && maxd <= 4,
          "RGB JPEG at quality 100: %s, largest difference %d", st == COL_OK ? "read" : err.msg, maxd);
    col_image_free(&img);
    st = col_image_read(p, 4, &img, &err);
    bool alpha = st == COL_OK && img.channels == 4;
    for (int i = 0; alpha && i < W * H; i++)
        alpha = img.data[4 * i + 3] == 255;
    TL_OK(alpha, "RGB JPEG as RGBA: opaque alpha added");
    col_image_free(&img);

    p = tpath("gray.jpg");
    ref_write_jpeg(p, gray, W, H, 1, 100);
    st = col_image_read(p, 0, &img, &err);
    maxd = 0;
    if (st == COL_OK && img.channels == 1)
        for (int i = 0; i < W * H; i++)
            maxd = abs((int)img.data[i] - gray[i]) > maxd ? abs((int)img.data[i] - gray[i]) : maxd;
    TL_OK(st == COL_OK && img.channels == 1 && maxd <= 2, "grayscale JPEG: %s, largest difference %d",
          st == COL_OK ? "read as 1 channel" : err.msg, maxd);
    col_image_free(&img);
    st = col_image_read(p, 3, &img, &err);
    bool same = st == COL_OK && img.channels == 3;
    for (int i = 0; same && i < W * H; i++)
        same = img.data[3 * i] == img.data[3 * i + 1] && img.data[3 * i] == img.data[3 * i + 2];
    TL_OK(same, "grayscale JPEG as RGB: three equal channels");
    col_image_free(&img);

    uint8_t cmyk[8 * 8 * 4];
    for (size_t i = 0; i < sizeof cmyk; i++)
        cmyk[i] = rnd8();
    p = tpath("cmyk.jpg");
    ref_write_jpeg(p, cmyk, 8, 8, 4, 90);
    st = col_image_read(p, 0, &img, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "CMYK") && one_line(&err) && img.data == NULL, "CMYK JPEG refused: %s",
          err.msg);

    /* every prefix of a JPEG: an error, never a crash or a gray-padded image */
    char *buf = NULL;
    size_t len = 0;
    col_read_file(tpath("rgb.jpg"), 0, &buf, &len, &err);
    int errors = 0, lines = 0;
    for (size_t k = 0; k < len; k++) {
        put_file(tpath("cut.jpg"), buf, k);
        st = col_image_read(tpath("cut.jpg"), 0, &img, &err);
        errors += st != COL_OK;
        lines += st != COL_OK && one_line(&err);
        col_image_free(&img);
    }
    TL_OK(len > 0 && errors == (int)len && lines == errors, "every shorter prefix of a %zu-byte JPEG: %d errors, %d one-line",
          len, errors, lines);
    free(buf);
}

/* ---- hostile files ---- */

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static void expect_error(const char *what, const char *path, col_status code)
{
    col_image img = {0};
    col_err err = {0};
    col_status st = col_image_read(path, 0, &img, &err);
    TL_OK(st == code && one_line(&err) && strstr(err.msg, path) && img.data == NULL, "%s: %s: %s", what,
          col_status_name(st), err.msg);
    col_image_free(&img);
}

static void test_hostile(void)
{
    put_file(tpath("empty.png"), "", 0);
    expect_error("empty file", tpath("empty.png"), COL_EFORMAT);
    put_file(tpath("notimage.png"), "hello, world\n", 13);
    expect_error("a text file named .png", tpath("notimage.png"), COL_EFORMAT);
    expect_error("missing file", tpath("nosuch.png"), COL_EIO);
    expect_error("a directory", dir, COL_EIO);

    /* a small valid PNG, then every prefix of it */
    uint8_t px[5 * 4 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = rnd8();
    col_image img = {5, 4, 3, px};
    const char *text[] = {"parameters", "steps 20", NULL};
    col_err err = {0};
    col_image_write_png(tpath("small.png"), &img, text, &err);
    char *buf = NULL;
    size_t len = 0;
    col_read_file(tpath("small.png"), 0, &buf, &len, &err);
    int errors = 0, lines = 0, good = 0;
    for (size_t k = 0; k < len; k++) {
        put_file(tpath("cut.png"), buf, k);
        col_image back = {0};
        col_status st = col_image_read(tpath("cut.png"), 0, &back, &err);
        if (st != COL_OK) {
            errors++;
            lines += one_line(&err);
        } else {
            good += back.width == 5 && back.height == 4 && memcmp(back.data, px, sizeof px) == 0;
        }
        col_image_free(&back);
        char *v = NULL;
        st = col_image_read_text(tpath("cut.png"), "parameters", &v, &err);
        free(v);
    }
    TL_OK(len > 0 && errors + good == (int)len && lines == errors,
          "every shorter prefix of a %zu-byte PNG: %d errors (%d one-line), %d whole images", len, errors, lines, good);

    /* a bad CRC: on IHDR, and on the pixel data */
    uint8_t *copy = malloc(len);
    memcpy(copy, buf, len);
    copy[29] ^= 0x55; /* IHDR's CRC: signature 8 + length 4 + type 4 + data 13 */
    put_file(tpath("crc.png"), copy, len);
    expect_error("bad IHDR CRC", tpath("crc.png"), COL_EFORMAT);
    memcpy(copy, buf, len);
    uint8_t *idat = memmem(copy, len, "IDAT", 4);
    if (idat)
        idat[6] ^= 0x01;
    put_file(tpath("crc2.png"), copy, len);
    expect_error("bad IDAT CRC", tpath("crc2.png"), COL_EFORMAT);
    free(copy);
    free(buf);

    /* a header declaring 100000 x 100000 (and one of zero width) */
    /* signature, IHDR, an empty IDAT (where libpng stops reading the header), IEND */
    uint8_t hdr[8 + 25 + 12 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    put32(hdr + 8, 13);
    memcpy(hdr + 12, "IHDR", 4);
    put32(hdr + 16, 100000);
    put32(hdr + 20, 100000);
    hdr[24] = 8; /* bit depth */
    hdr[25] = 2; /* RGB */
    put32(hdr + 29, crc32_png(hdr + 12, 17));
    for (int c = 0; c < 2; c++) {
        uint8_t *k = hdr + 33 + 12 * c;
        put32(k, 0);
        memcpy(k + 4, c ? "IEND" : "IDAT", 4);
        put32(k + 8, crc32_png(k + 4, 4));
    }
    put_file(tpath("huge.png"), hdr, sizeof hdr);
    col_image back = {0};
    col_status st = col_image_read(tpath("huge.png"), 0, &back, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "100000x100000") && one_line(&err), "100000x100000 refused: %s", err.msg);
    put32(hdr + 16, 0);
    put32(hdr + 29, crc32_png(hdr + 12, 17));
    put_file(tpath("zero.png"), hdr, sizeof hdr);
    expect_error("zero width", tpath("zero.png"), COL_EFORMAT);
    col_image_free(&back);
}

/* ---- writing where it cannot ---- */

static void test_write_failures(void)
{
    uint8_t px[3] = {1, 2, 3};
    col_image img = {1, 1, 3, px};
    col_err err = {0};
    const char *p = tpath("nodir/out.png");
    col_status st = col_image_write_png(p, &img, NULL, &err);
    TL_OK(st == COL_EIO && one_line(&err) && strstr(err.msg, p), "missing directory: %s", err.msg);

    p = tpath("readonly.png");
    put_file(p, "old", 3);
    chmod(p, 0444);
    st = col_image_write_png(p, &img, NULL, &err);
    char *back = NULL;
    size_t len = 0;
    col_err e2 = {0};
    col_read_file(p, 0, &back, &len, &e2);
    TL_OK(st == COL_EIO && one_line(&err) && back && len == 3 && memcmp(back, "old", 3) == 0,
          "over a read-only file: %s; the old file intact", err.msg);
    free(back);
    chmod(p, 0644);

    col_image bad = {1, 1, 2, px};
    st = col_image_write_png(tpath("two.png"), &bad, NULL, &err);
    TL_OK(st == COL_EINVAL && one_line(&err), "2 channels refused: %s", err.msg);
    col_image none = {0, 5, 3, px};
    st = col_image_write_png(tpath("zero.png"), &none, NULL, &err);
    TL_OK(st == COL_EINVAL && one_line(&err), "zero width refused: %s", err.msg);

    /* no temporary file left behind by any failure */
    DIR *d = opendir(dir);
    int tmps = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        tmps += strstr(e->d_name, ".tmp") != NULL;
    if (d)
        closedir(d);
    TL_OK(tmps == 0, "no temporary files left: %d", tmps);
}

static void rm_tree(void)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlink(tpath(e->d_name));
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/colimgXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_round_trips();
    test_text();
    test_png_kinds();
    test_jpeg();
    test_hostile();
    test_write_failures();
    rm_tree();
    return tl_done();
}
