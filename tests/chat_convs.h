/* chat_convs.h - the conversations of tools/refgen/make_chat_fixtures.py
 * (tests/fixtures/chat), shared by the template and SFT tests. */
#ifndef COL_TESTS_CHAT_CONVS_H
#define COL_TESTS_CHAT_CONVS_H

#include "chat_template.h"

#define S COL_ROLE_SYSTEM
#define U COL_ROLE_USER
#define A COL_ROLE_ASSISTANT

static const col_chat_message conv3[] = {
    {S, "You are a terse assistant.\nAnswer in one line."},
    {U, "What is 2+2?"},
    {A, "4."},
    {U, "And the capital of France? Use \"quotes\" & <b>tags</b>."},
    {A, "\"Paris\" \xe2\x80\x94 <b>Paris</b>."},
    {U, "Thanks!\nBye."},
};
static const col_chat_message nosys[] = {{U, "Hi"}, {A, "Hello! How can I help?"}};
static const col_chat_message ws[] = {
    {S, "  sys with spaces \n"},
    {U, "\n\t user text  \n"},
    {A, "  answer\xc2\xa0 \n"},
    {U, " last "},
};

#endif
