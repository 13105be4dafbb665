/* chat.h - the roles of a chat conversation, shared by the training data
 * reader (dataset.h) and the chat templates (models/lm/chat_template.h). */
#ifndef COL_CHAT_H
#define COL_CHAT_H

typedef enum { COL_ROLE_SYSTEM, COL_ROLE_USER, COL_ROLE_ASSISTANT } col_chat_role;

/* "system", "user", "assistant"; NULL for a value outside the enum. */
const char *col_chat_role_name(col_chat_role r);

#endif
