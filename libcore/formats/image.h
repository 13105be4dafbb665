/* image.h - image files: PNG and JPEG in, PNG out (with text chunks).
 *
 * For the image programs (init and mask images in, generated images out).
 * Every file is untrusted: a malformed, truncated or oversized file is an
 * error with one line naming it (COL_EFORMAT), never a crash, an exit or a
 * message printed by libpng or libjpeg. The format is told from the file's
 * first bytes, never from its name. */
#ifndef COL_IMAGE_H
#define COL_IMAGE_H

#include <stdint.h>

#include "status.h"

/* 8-bit pixels, row-major, channels interleaved (height x width x channels):
 * 1 = gray, 3 = RGB, 4 = RGBA. */
typedef struct {
    int width, height, channels;
    uint8_t *data;
} col_image;

/* The largest image read or written, in pixels (width * height): 16384 x 16384.
 * A file declaring more is refused before any pixel memory is allocated. */
#define COL_IMAGE_MAX_PIXELS ((int64_t)16384 * 16384)

/* Reads a PNG (any bit depth and colour type, interlaced or not) or a JPEG
 * (grayscale or colour; CMYK is refused) into *out, converted to 8 bits and
 * to want_channels (1, 3 or 4; 0 = as stored: gray 1, gray+alpha 2 becomes 4,
 * colour 3, colour with alpha or transparency 4). Converting to gray uses the
 * ITU-R BT.709 weights (libpng's); dropping alpha drops it (no compositing).
 * On failure *out is left empty. Free with col_image_free. */
col_status col_image_read(const char *path, int want_channels, col_image *out, col_err *err);

/* Writes img as an 8-bit PNG, atomically (a temporary file beside path, then
 * a rename: a failure leaves no partial file and any old file untouched).
 * text: NULL, or key, value pairs ending with a NULL key; a value that is
 * plain ASCII/Latin-1-safe goes in a tEXt chunk, any other UTF-8 in an iTXt
 * chunk. Keys are 1-79 printable Latin-1 characters (PNG's rule). */
col_status col_image_write_png(const char *path, const col_image *img, const char *const *text, col_err *err);

/* The value of the text chunk (tEXt, zTXt or iTXt) named key in the PNG at
 * path, newly allocated (free()); COL_EFORMAT if the file has none. */
col_status col_image_read_text(const char *path, const char *key, char **value, col_err *err);

/* Frees the pixels and empties img (NULL is fine). */
void col_image_free(col_image *img);

#endif
