/* image.c - PNG (libpng) and JPEG (libjpeg) in, PNG out.
 *
 * Both libraries report errors by calling a function that must not return;
 * their defaults print to stderr and (libjpeg) exit. Here each has its own
 * error handler that keeps the message and longjmps back to the call that
 * set it up, which frees everything and returns COL_EFORMAT. Variables that
 * change between setjmp and a longjmp are volatile. */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "textio.h"

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

void col_image_free(col_image *img)
{
    if (!img)
        return;
    free(img->data);
    memset(img, 0, sizeof *img);
}

/* ---- opening a file to read ---- */

enum img_kind { IMG_PNG, IMG_JPEG };

/* Opens path, refuses what is not a regular file, tells PNG from JPEG by the
 * first bytes and leaves the stream at the start of the file. */
static col_status open_image(const char *path, FILE **fp, enum img_kind *kind, col_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open image %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return col_err_set(err, COL_EIO, "cannot read image %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return col_err_set(err, COL_EIO, "cannot read image %s: %s", path,
                           S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return col_err_set(err, COL_ENOMEM, "cannot read image %s: %s", path, strerror(e));
    }
    uint8_t head[8];
    size_t n = fread(head, 1, sizeof head, f);
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        return col_err_set(err, COL_EIO, "cannot read image %s: %s", path, strerror(e));
    }
    if (n == sizeof head && memcmp(head, png_magic, 8) == 0) {
        *kind = IMG_PNG;
    } else if (n >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) {
        *kind = IMG_JPEG;
    } else {
        fclose(f);
        return col_err_set(err, COL_EFORMAT, n == 0 ? "image %s is empty" : "%s is not a PNG or JPEG image", path);
    }
    if (fseek(f, 0, SEEK_SET) != 0) {
        int e = errno;
        fclose(f);
        return col_err_set(err, COL_EIO, "cannot read image %s: %s", path, strerror(e));
    }
    *fp = f;
    return COL_OK;
}

static col_status check_size(const char *path, const char *what, uint64_t w, uint64_t h, col_err *err)
{
    if (w == 0 || h == 0)
        return col_err_set(err, COL_EFORMAT, "%s image %s has a zero size (%llux%llu)", what, path,
                           (unsigned long long)w, (unsigned long long)h);
    if (w * h > (uint64_t)COL_IMAGE_MAX_PIXELS)
        return col_err_set(err, COL_EFORMAT, "%s image %s is %llux%llu, more than the %lld pixels allowed (16384x16384)",
                           what, path, (unsigned long long)w, (unsigned long long)h, (long long)COL_IMAGE_MAX_PIXELS);
    return COL_OK;
}

/* ---- PNG ---- */

typedef struct {
    char msg[256];
} png_errctx;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_errctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->msg, sizeof ctx->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png; /* warnings (a bad ancillary chunk skipped, ...) are not errors: keep quiet */
    (void)msg;
}

/* The message for a libpng failure reading fp. */
static col_status png_read_failed(const char *path, FILE *fp, const png_errctx *ctx, col_err *err)
{
    if (feof(fp))
        return col_err_set(err, COL_EFORMAT, "PNG image %s is truncated", path);
    if (ferror(fp))
        return col_err_set(err, COL_EIO, "cannot read PNG image %s: read error", path);
    return col_err_set(err, COL_EFORMAT, "PNG image %s is corrupt (libpng: %s)", path, ctx->msg);
}

/* Sets libpng's transforms so the rows come out 8-bit with want channels
 * (0: as stored, gray+alpha as RGBA); returns the channel count. */
static int png_set_transforms(png_structp png, png_infop info, int want)
{
    int ct = png_get_color_type(png, info);
    bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    bool color = (ct & PNG_COLOR_MASK_COLOR) != 0; /* RGB, RGBA or palette */
    bool alpha = (ct & PNG_COLOR_MASK_ALPHA) != 0 || trns;
    if (want == 0)
        want = alpha ? 4 : color ? 3 : 1;
    if (ct == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (trns) {
        if (want == 4)
            png_set_tRNS_to_alpha(png);
        else if (ct != PNG_COLOR_TYPE_PALETTE)
            alpha = false; /* the transparent colour is simply not turned into alpha */
        /* (libpng's palette expansion brings the palette's alpha with it: stripped below) */
    }
    if (png_get_bit_depth(png, info) == 16)
        png_set_scale_16(png);
    if (want == 1) {
        if (color)
            png_set_rgb_to_gray_fixed(png, 1, -1, -1);
        if (alpha)
            png_set_strip_alpha(png);
    } else {
        if (!color)
            png_set_gray_to_rgb(png);
        if (want == 3 && alpha)
            png_set_strip_alpha(png);
        if (want == 4 && !alpha)
            png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
    }
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    return want;
}

/* Finds key among info's text chunks; a copy in *value (NULL if absent). */
static bool png_find_text(png_structp png, png_infop info, const char *key, char **value)
{
    png_textp text = NULL;
    int n = png_get_text(png, info, &text, NULL);
    for (int i = 0; i < n; i++) {
        if (strcmp(text[i].key, key) != 0)
            continue;
        size_t len = text[i].compression > 0 ? text[i].itxt_length : text[i].text_length;
        char *v = malloc(len + 1);
        if (!v)
            return false;
        if (len)
            memcpy(v, text[i].text, len);
        v[len] = '\0';
        *value = v;
        return true;
    }
    return false;
}

/* Reads the PNG in fp: the image into *out, or (out NULL) only the text
 * chunk key into *value, decoding the pixels a row at a time when the chunk
 * may come after them. */
static col_status read_png(const char *path, FILE *fp, int want, col_image *out, const char *key, char **value,
                           col_err *err)
{
    png_errctx ctx = {{0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return col_err_set(err, COL_ENOMEM, "out of memory reading PNG image %s", path);
    }
    uint8_t *volatile data = NULL;
    png_bytep *volatile rows = NULL;
    volatile col_status st = COL_OK;
    if (setjmp(png_jmpbuf(png))) {
        st = png_read_failed(path, fp, &ctx, err);
        goto done;
    }
    png_init_io(png, fp);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    st = check_size(path, "PNG", w, h, err);
    if (st != COL_OK)
        goto done;
    if (!out && png_find_text(png, info, key, value))
        goto done;
    int ch = png_set_transforms(png, info, out ? want : 0);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (png_get_bit_depth(png, info) != 8 || png_get_channels(png, info) != ch || rowbytes != (size_t)w * ch) {
        st = col_err_set(err, COL_EINTERNAL, "reading PNG image %s: libpng's conversion gave %d channels of %d bits",
                         path, png_get_channels(png, info), png_get_bit_depth(png, info));
        goto done;
    }
    if (out) {
        data = malloc((size_t)w * h * ch);
        rows = malloc(sizeof(png_bytep) * h);
        if (!data || !rows) {
            st = col_err_set(err, COL_ENOMEM, "out of memory reading PNG image %s (%ux%u)", path, w, h);
            goto done;
        }
        for (png_uint_32 y = 0; y < h; y++)
            rows[y] = data + (size_t)y * w * ch;
        png_read_image(png, rows);
    } else {
        /* the chunk may follow the pixels: decode them into one row, dropping them */
        data = malloc(rowbytes);
        if (!data) {
            st = col_err_set(err, COL_ENOMEM, "out of memory reading PNG image %s", path);
            goto done;
        }
        int passes = png_get_interlace_type(png, info) == PNG_INTERLACE_ADAM7 ? 7 : 1;
        for (int p = 0; p < passes; p++)
            for (png_uint_32 y = 0; y < h; y++)
                png_read_row(png, data, NULL);
    }
    /* the chunks after the pixels too: a truncated or corrupt end is an error */
    png_read_end(png, info);
    if (out) {
        out->width = (int)w;
        out->height = (int)h;
        out->channels = ch;
        out->data = data;
        data = NULL;
    } else if (!png_find_text(png, info, key, value)) {
        st = col_err_set(err, COL_EFORMAT, "PNG image %s has no text chunk \"%s\"", path, key);
    }
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(data);
    free(rows);
    return st;
}

/* ---- JPEG ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_errctx;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_errctx *ctx = (jpeg_errctx *)cinfo->err;
    cinfo->err->format_message(cinfo, ctx->msg);
    longjmp(ctx->jb, 1);
}

/* libjpeg's warnings are corrupt data it recovered from; a file that ends
 * early it pads with gray, which would pass a damaged image on as whole:
 * that one is an error here, the others are dropped quietly. */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
        jpeg_on_error(cinfo);
}

static void jpeg_no_output(j_common_ptr cinfo)
{
    (void)cinfo;
}

static col_status read_jpeg(const char *path, FILE *fp, int want, col_image *out, col_err *err)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_errctx ctx;
    cinfo.err = jpeg_std_error(&ctx.pub);
    ctx.pub.error_exit = jpeg_on_error;
    ctx.pub.emit_message = jpeg_on_message;
    ctx.pub.output_message = jpeg_no_output;
    ctx.msg[0] = '\0';
    uint8_t *volatile data = NULL;
    JSAMPLE *volatile row = NULL;
    volatile col_status st = COL_OK;
    if (setjmp(ctx.jb)) {
        if (ferror(fp))
            st = col_err_set(err, COL_EIO, "cannot read JPEG image %s: read error", path);
        else if (ctx.pub.msg_code == JWRN_JPEG_EOF)
            st = col_err_set(err, COL_EFORMAT, "JPEG image %s is truncated", path);
        else
            st = col_err_set(err, COL_EFORMAT, "JPEG image %s is corrupt (libjpeg: %s)", path, ctx.msg);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, fp);
    if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) {
        st = col_err_set(err, COL_EFORMAT, "JPEG image %s holds no image", path);
        goto done;
    }
    st = check_size(path, "JPEG", cinfo.image_width, cinfo.image_height, err);
    if (st != COL_OK)
        goto done;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        st = col_err_set(err, COL_EUNSUPPORTED, "JPEG image %s is CMYK, which is not supported: convert it to RGB", path);
        goto done;
    }
    if (cinfo.num_components != 1 && cinfo.num_components != 3) {
        st = col_err_set(err, COL_EFORMAT, "JPEG image %s has %d colour components (1 or 3 are supported)", path,
                         cinfo.num_components);
        goto done;
    }
    int ch = want ? want : cinfo.num_components == 1 ? 1 : 3;
    int dec = ch == 1 ? 1 : 3; /* what libjpeg decodes to; alpha is added here */
    cinfo.out_color_space = dec == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    size_t w = cinfo.output_width, h = cinfo.output_height;
    if (cinfo.output_components != dec || w != cinfo.image_width || h != cinfo.image_height) {
        st = col_err_set(err, COL_EINTERNAL, "reading JPEG image %s: libjpeg decoded %d components", path,
                         cinfo.output_components);
        goto done;
    }
    data = malloc(w * h * ch);
    row = malloc(w * dec);
    if (!data || !row) {
        st = col_err_set(err, COL_ENOMEM, "out of memory reading JPEG image %s (%zux%zu)", path, w, h);
        goto done;
    }
    while (cinfo.output_scanline < h) {
        size_t y = cinfo.output_scanline;
        JSAMPROW r = row;
        if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) {
            st = col_err_set(err, COL_EFORMAT, "JPEG image %s is truncated", path);
            goto done;
        }
        uint8_t *d = data + y * w * ch;
        if (ch == dec) {
            memcpy(d, row, w * dec);
        } else {
            for (size_t x = 0; x < w; x++) {
                d[4 * x] = row[3 * x];
                d[4 * x + 1] = row[3 * x + 1];
                d[4 * x + 2] = row[3 * x + 2];
                d[4 * x + 3] = 0xff;
            }
        }
    }
    jpeg_finish_decompress(&cinfo);
    out->width = (int)w;
    out->height = (int)h;
    out->channels = ch;
    out->data = data;
    data = NULL;
done:
    jpeg_destroy_decompress(&cinfo);
    free(data);
    free(row);
    return st;
}

col_status col_image_read(const char *path, int want_channels, col_image *out, col_err *err)
{
    if (!out || !path)
        return col_err_set(err, COL_EINVAL, "col_image_read: no path or no image to fill");
    memset(out, 0, sizeof *out);
    if (want_channels != 0 && want_channels != 1 && want_channels != 3 && want_channels != 4)
        return col_err_set(err, COL_EINVAL, "reading image %s: %d channels asked for (0, 1, 3 or 4 are possible)", path,
                           want_channels);
    FILE *fp;
    enum img_kind kind;
    col_status st = open_image(path, &fp, &kind, err);
    if (st != COL_OK)
        return st;
    st = kind == IMG_PNG ? read_png(path, fp, want_channels, out, NULL, NULL, err)
                         : read_jpeg(path, fp, want_channels, out, err);
    fclose(fp);
    return st;
}

col_status col_image_read_text(const char *path, const char *key, char **value, col_err *err)
{
    if (!path || !key || !value)
        return col_err_set(err, COL_EINVAL, "col_image_read_text: no path, key or value");
    *value = NULL;
    FILE *fp;
    enum img_kind kind;
    col_status st = open_image(path, &fp, &kind, err);
    if (st != COL_OK)
        return st;
    if (kind == IMG_PNG)
        st = read_png(path, fp, 0, NULL, key, value, err);
    else
        st = col_err_set(err, COL_EFORMAT, "%s is a JPEG image, which holds no PNG text chunk \"%s\"", path, key);
    fclose(fp);
    return st;
}

/* ---- writing PNG ---- */

typedef struct {
    png_errctx e;
    int fd;
    int write_errno; /* set when writing the file failed, not libpng */
} png_writer;

static void png_write_fd(png_structp png, png_bytep data, size_t len)
{
    png_writer *w = png_get_io_ptr(png);
    errno = 0;
    if (!col_write_all(w->fd, data, len)) {
        w->write_errno = errno ? errno : EIO;
        png_error(png, "write failed");
    }
}

static void png_flush_none(png_structp png)
{
    (void)png; /* col_atomic_end fsyncs */
}

static bool is_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return false;
    return true;
}

static bool is_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || (n == 1 && *p < 0xc2) || (n == 3 && *p > 0xf4))
            return false;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return false;
    }
    return true;
}

/* PNG keywords: 1-79 characters; here printable ASCII, no leading, trailing
 * or doubled spaces (libpng would otherwise change or reject them). */
static bool valid_key(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > 79 || k[0] == ' ' || k[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (k[i] < 0x20 || k[i] > 0x7e || (k[i] == ' ' && k[i + 1] == ' '))
            return false;
    return true;
}

col_status col_image_write_png(const char *path, const col_image *img, const char *const *text, col_err *err)
{
    if (!path || !img || !img->data)
        return col_err_set(err, COL_EINVAL, "col_image_write_png: no path or no image");
    if (img->channels != 1 && img->channels != 3 && img->channels != 4)
        return col_err_set(err, COL_EINVAL, "cannot write %s: an image of %d channels (1, 3 or 4 are possible)", path,
                           img->channels);
    if (img->width <= 0 || img->height <= 0 || (int64_t)img->width * img->height > COL_IMAGE_MAX_PIXELS)
        return col_err_set(err, COL_EINVAL, "cannot write %s: an image of %dx%d (1 to %lld pixels are possible)", path,
                           img->width, img->height, (long long)COL_IMAGE_MAX_PIXELS);
    int ntext = 0;
    for (; text && text[2 * ntext]; ntext++) {
        const char *k = text[2 * ntext], *v = text[2 * ntext + 1];
        if (!valid_key(k))
            return col_err_set(err, COL_EINVAL,
                               "cannot write %s: text key \"%.80s\" is not 1-79 printable ASCII characters without "
                               "leading, trailing or doubled spaces", path, k);
        if (!v || !is_utf8(v))
            return col_err_set(err, COL_EINVAL, "cannot write %s: the text for key \"%s\" is %s", path, k,
                               v ? "not valid UTF-8" : "missing");
    }
    /* A read-only file is one its owner meant to keep: the rename would
     * replace it regardless of its mode, so refuse here. */
    struct stat st_old;
    if (stat(path, &st_old) == 0 && S_ISREG(st_old.st_mode) && (st_old.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0)
        return col_err_set(err, COL_EIO, "cannot write %s: the file exists and is read-only", path);

    png_text *chunks = ntext ? calloc((size_t)ntext, sizeof *chunks) : NULL;
    if (ntext && !chunks)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    for (int i = 0; i < ntext; i++) {
        char *v = (char *)text[2 * i + 1];
        chunks[i].key = (char *)text[2 * i];
        chunks[i].text = v;
        if (is_ascii(v)) {
            chunks[i].compression = PNG_TEXT_COMPRESSION_NONE;
            chunks[i].text_length = strlen(v);
        } else {
            /* tEXt is Latin-1: UTF-8 there would read back as other characters */
            chunks[i].compression = PNG_ITXT_COMPRESSION_NONE;
            chunks[i].itxt_length = strlen(v);
            chunks[i].lang = (char *)"";
            chunks[i].lang_key = (char *)"";
        }
    }

    col_atomic_file f;
    col_status st = col_atomic_begin(path, &f, err);
    if (st != COL_OK) {
        free(chunks);
        return st;
    }
    col_err we = {0}; /* the first failure, kept over removing the temporary file */
    png_writer w = {.fd = f.fd};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w.e, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *volatile rows = NULL;
    volatile bool ok = false;
    if (!info) {
        col_err_set(&we, COL_ENOMEM, "out of memory writing %s", path);
        goto done;
    }
    if (setjmp(png_jmpbuf(png))) {
        if (w.write_errno)
            col_err_set(&we, COL_EIO, "cannot write %s: %s", path, strerror(w.write_errno));
        else
            col_err_set(&we, COL_EINTERNAL, "cannot write %s: libpng: %s", path, w.e.msg);
        goto done;
    }
    rows = malloc(sizeof(png_bytep) * (size_t)img->height);
    if (!rows) {
        col_err_set(&we, COL_ENOMEM, "out of memory writing %s", path);
        goto done;
    }
    size_t stride = (size_t)img->width * img->channels;
    for (int y = 0; y < img->height; y++)
        rows[y] = img->data + (size_t)y * stride;
    png_set_write_fn(png, &w, png_write_fd, png_flush_none);
    int ct = img->channels == 1 ? PNG_COLOR_TYPE_GRAY : img->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGBA;
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, ct, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (ntext)
        png_set_text(png, info, chunks, ntext);
    png_write_info(png, info);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    ok = true;
done:
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(chunks);
    if (!ok) {
        col_atomic_end(&f, path, false, NULL);
        return col_err_copy(err, &we);
    }
    return col_atomic_end(&f, path, true, err);
}
