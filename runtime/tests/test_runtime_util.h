/* test_runtime_util.h — helpers the runtime tests share: views of device
 * memory and the device-memory allocation the queued ops require. */
#ifndef VTPU_TEST_RUNTIME_UTIL_H
#define VTPU_TEST_RUNTIME_UTIL_H

#include <string.h>

#include "internal.h"
#include "test.h"

/* A view of data: sizes and strides in elements, PyTorch's convention. */
static inline vt_tensor view(void *data, vt_dtype dt, int ndim, const int64_t *sizes, const int64_t *strides,
                             int64_t offset) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    t.offset = offset;
    for (int i = 0; i < ndim; i++) t.sizes[i] = sizes[i], t.strides[i] = strides[i];
    return t;
}

/* n contiguous elements. */
static inline vt_tensor vec(void *data, vt_dtype dt, int64_t n) {
    int64_t one = 1;
    return view(data, dt, 1, &n, &one, 0);
}

/* Device memory of dev (queued ops take nothing else). */
static inline void *dev_alloc_on(int dev, size_t bytes) {
    void *p = NULL;
    CHECK_OK(vt_hbm_alloc(dev, bytes, &p));
    return p;
}

#endif
