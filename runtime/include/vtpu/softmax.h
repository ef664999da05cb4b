/* vtpu/softmax.h — softmax, log_softmax and the losses built on them (nll, cross-entropy, mse).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_SOFTMAX_H
#define VTPU_SOFTMAX_H

#endif /* VTPU_SOFTMAX_H */
