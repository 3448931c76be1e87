/* webui.h -- the web chat page `plume serve` answers at GET /: tools/webui.html, turned into
 * $(BUILD)/webui.c by the Makefile (od + sed, no xxd) and linked into the plume binary only. */
#ifndef PLUME_WEBUI_H
#define PLUME_WEBUI_H

#include <stddef.h>

/* The page's bytes (UTF-8 HTML), NUL-terminated; plume_webui_html_len excludes the NUL. */
extern const char plume_webui_html[];
extern const size_t plume_webui_html_len;

#endif
