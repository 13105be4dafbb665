/* fuzz_chat_template.c - tokenizer_config.json detection must never crash;
 * a detected family must render a small conversation with spans inside the
 * text. */
#include <stdint.h>
#include <stdlib.h>

#include "chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_chat_family f;
    col_err err = {0};
    if (col_chat_detect((const char *)data, size, &f, &err) != COL_OK)
        return 0;
    col_chat_message m[3] = {{COL_ROLE_SYSTEM, "be brief"}, {COL_ROLE_USER, "hi"}, {COL_ROLE_ASSISTANT, "hello"}};
    col_chat_span sp[3];
    char *out = NULL;
    size_t len = 0;
    if (col_chat_render(f, m, 3, true, &out, &len, sp, &err) != COL_OK)
        abort(); /* a detected family renders any valid conversation */
    for (int i = 0; i < 3; i++)
        if (sp[i].begin > sp[i].end || sp[i].end > len || sp[i].train_begin > sp[i].train_end || sp[i].train_end > len)
            abort();
    free(out);
    return 0;
}
