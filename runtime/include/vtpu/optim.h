/* vtpu/optim.h — multi-tensor (_foreach_*) ops and fused optimizer steps.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_OPTIM_H
#define VTPU_OPTIM_H

#endif /* VTPU_OPTIM_H */
