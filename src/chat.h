/* chat.h -- moved to src/chat/chat.h (the chat room). This forwarder keeps tools/serve/ building
 * until it includes "chat/chat.h"; then it goes. New code includes "chat/chat.h". */
#include "chat/chat.h"
