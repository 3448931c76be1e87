/* session.h -- what the library's other files call in session.c (the session struct is
 * model.h's, where forward.c reads it). */
#ifndef PLUME_SESSION_H
#define PLUME_SESSION_H

#include "model.h"

/* After a step of a session ended at n_past: take the ring snapshot due there, if any. */
void plume_session_stepped(plume_session *s);

#endif
