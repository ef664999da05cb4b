/* vtpu/pool.h — pooling (max, average, adaptive) and upsampling (nearest, bilinear).
 * Part of the public C API: included by vtpu/vtpu.h, never on its own. */
#ifndef VTPU_POOL_H
#define VTPU_POOL_H

#endif /* VTPU_POOL_H */
