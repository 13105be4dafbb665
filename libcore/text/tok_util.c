/* tok_util.c - the bottom layer of the tokenizer (tok_internal.h): error
 * messages that name the file, tokenizer.json field readers, UTF-8, hashing,
 * and GPT-2's byte <-> unicode alphabet. It calls no other tokenizer file. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tok_internal.h"

/* ---- errors ---- */

col_status col_tok_fail(col_err *err, col_status code, const char *name, const char *fmt, ...)
{
    char msg[COL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return col_err_set(err, code, "%s: %s", name, msg);
}

const char *col_tok_show(const char *s, size_t n, char out[64])
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (k > 50) {
            memcpy(out + k, "...", 4);
            return out;
        }
        if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\')
            k += (size_t)snprintf(out + k, 64 - k, "\\x%02X", c);
        else
            out[k++] = (char)c;
    }
    out[k] = '\0';
    return out;
}

/* ---- JSON fields ---- */

const cJSON *col_tok_json_field(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

bool col_tok_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || (double)(int64_t)d != d)
        return false;
    *out = (int64_t)d;
    return true;
}

int col_tok_json_bool(const cJSON *o, const char *key, int def)
{
    const cJSON *v = col_tok_json_field(o, key);
    if (!v || cJSON_IsNull(v))
        return def;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

/* text -> JSON, failing with the byte and line of the first problem */
col_status col_tok_parse_json(const char *text, size_t len, const char *name, cJSON **out, col_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root && end) /* only white space may follow */
        while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
    if (!root || (end && end < text + len && *end != '\0')) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0, line = 1;
        for (size_t i = 0; i < at; i++)
            line += text[i] == '\n';
        cJSON_Delete(root);
        return col_tok_fail(err, COL_EFORMAT, name, "%s JSON at byte %zu (line %zu)",
                            root ? "unexpected data after the" : "invalid", at, line);
    }
    *out = root;
    return COL_OK;
}

/* ---- UTF-8 ---- */

size_t col_utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2 || c > 0xF4)
        return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        uint32_t v = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        *cp = v;
        return 3;
    }
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
        return 0;
    uint32_t v = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    if (v < 0x10000 || v > 0x10FFFF)
        return 0;
    *cp = v;
    return 4;
}

size_t col_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        uint32_t cp;
        size_t k = col_utf8_char(s + i, n - i, &cp);
        if (k == 0)
            break;
        i += k;
    }
    return i;
}

bool col_unicode_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* ---- hashing ---- */

uint64_t col_tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    return h;
}

/* ---- GPT-2 bytes_to_unicode ---- */

static bool printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 bytes that are not printable, 0x00-0x20, 0x7F-0xA0 and 0xAD, take
 * code points 256.. in byte order. */
uint32_t col_bytelevel_cp(unsigned b)
{
    b &= 0xFF;
    if (printable_byte(b))
        return b;
    if (b <= 0x20)
        return 256 + b;
    if (b <= 0xA0)
        return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

int col_bytelevel_byte(uint32_t cp)
{
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    uint32_t k = cp - 256;
    if (k < 33)
        return (int)k;
    if (k < 67)
        return (int)(0x7F + k - 33);
    return k == 67 ? 0xAD : -1;
}

bool col_bytelevel_raw(const char *s, size_t n, char *out, size_t *outlen)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = col_utf8_char((const unsigned char *)s + i, n - i, &cp);
        int b = len ? col_bytelevel_byte(cp) : -1;
        if (b < 0)
            return false;
        out[k++] = (char)b;
        i += len;
    }
    *outlen = k;
    return true;
}
