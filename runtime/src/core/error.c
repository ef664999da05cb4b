/* error.c — status names and the thread-local last-error message every
 * fallible call leaves behind for the binding to raise. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *vt_status_string(vt_status s) {
    switch (s) {
    case VT_OK: return "VT_OK";
    case VT_ERR_INVALID_ARGUMENT: return "VT_ERR_INVALID_ARGUMENT";
    case VT_ERR_OUT_OF_MEMORY: return "VT_ERR_OUT_OF_MEMORY";
    case VT_ERR_UNSUPPORTED: return "VT_ERR_UNSUPPORTED";
    case VT_ERR_INDEX: return "VT_ERR_INDEX";
    case VT_ERR_KERNEL: return "VT_ERR_KERNEL";
    case VT_ERR_BAD_FORK: return "VT_ERR_BAD_FORK";
    case VT_ERR_TIMEOUT: return "VT_ERR_TIMEOUT";
    case VT_ERR_INTERNAL: return "VT_ERR_INTERNAL";
    }
    return "VT_ERR_UNKNOWN";
}

const char *vt_last_error(void) { return last_error; }

void vt_clear_error(void) { last_error[0] = '\0'; }

vt_status vt_set_error(vt_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

vt_status vt_error_prefix(vt_status s, const char *name) {
    char msg[sizeof last_error];
    snprintf(msg, sizeof msg, "%s", last_error); /* vt_set_error must not read the buffer it writes */
    return vt_set_error(s, "%s: %s", name, msg);
}
