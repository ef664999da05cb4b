/* vtpu/norm.h — normalisation layers: layer_norm, rms_norm, group_norm, batch_norm.
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_NORM_H
#define VTPU_NORM_H

#endif /* VTPU_NORM_H */
