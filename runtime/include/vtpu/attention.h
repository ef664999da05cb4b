/* vtpu/attention.h — scaled dot-product attention as a tiled kernel (forward and backward).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_ATTENTION_H
#define VTPU_ATTENTION_H

#endif /* VTPU_ATTENTION_H */
