/* chat.h -- moved to src/chat/chat.h (the chat room). This forwarder keeps tools/serve/ building
 * until it includes "chat/chat.h" and calls plume_chat_render_full by its name; then it goes,
 * with the two old names below. New code includes "chat/chat.h". */
#include "chat/chat.h"

#define plume_chat_render_ex plume_chat_render_full    /* the old name, for tools/serve/ only */
typedef plume_chat_message_full plume_chat_message_ex; /* the old name, for tools/serve/ only */
