/* tensor.c — dtype facts, tensor geometry (numel, contiguity, broadcasting)
 * and the IEEE half-precision conversions every kernel relies on to match
 * PyTorch bit for bit. */
#include "internal.h"

static const size_t dtype_sizes[VT_DTYPE_COUNT] = {4, 2, 2, 8, 1, 1, 2, 4, 8, 1};
static const char *const dtype_names[VT_DTYPE_COUNT] = {
    "float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
};

size_t vt_dtype_size(vt_dtype dt) {
    if ((unsigned)dt >= VT_DTYPE_COUNT) return 0;
    return dtype_sizes[dt];
}

const char *vt_dtype_name(vt_dtype dt) {
    if ((unsigned)dt >= VT_DTYPE_COUNT) return "invalid";
    return dtype_names[dt];
}

int vt_dtype_is_float(vt_dtype dt) { return dt == VT_F32 || dt == VT_BF16 || dt == VT_F16 || dt == VT_F64; }

int64_t vt_tensor_numel(const vt_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->sizes[i];
    return n;
}

int vt_tensor_is_contiguous(const vt_tensor *t) {
    int64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        if (t->sizes[i] == 0) return 1; /* empty tensors are trivially contiguous, as in PyTorch */
        if (t->sizes[i] == 1) continue;
        if (t->strides[i] != expected) return 0;
        expected *= t->sizes[i];
    }
    return 1;
}

vt_scalar vt_scalar_from_double(double v) {
    vt_scalar s;
    s.f = v;
    /* i mirrors f where that is well defined, so a caller that reads the
     * wrong member still gets something sensible. */
    s.i = (v == v && v >= -9.2233720368547758e18 && v < 9.2233720368547758e18) ? (int64_t)v : 0;
    s.is_float = 1;
    return s;
}

vt_scalar vt_scalar_from_int(int64_t v) {
    vt_scalar s;
    s.f = (double)v;
    s.i = v;
    s.is_float = 0;
    return s;
}

/* Half precision, written as integer bit manipulation so it is exact on any
 * CPU and independent of the FPU rounding mode. */
float vt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        /* Inf stays Inf; NaN keeps its payload and comes out quiet, as the
         * hardware (and c10's multiply-based conversion) does. */
        u = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
    } else if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {
            /* Subnormal: normalise. Value = mant * 2^-24. */
            int e = -1;
            do {
                mant <<= 1;
                e++;
            } while (!(mant & 0x400u));
            mant &= 0x3ffu;
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
        }
    } else {
        u = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t vt_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* c10 canonical quiet NaN, sign kept */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
    if (a < 0x38800000u) {
        /* Result is subnormal (or zero): value/2^-24 rounded to nearest even. */
        if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero (2^-25 itself ties to 0) */
        uint32_t exp = a >> 23;
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - exp; /* 113 - exp + 13: bits dropped to reach units of 2^-24 */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias and round the 13 dropped bits to nearest even; a carry
     * into the exponent is the correct result. */
    uint32_t r = a - 0x38000000u; /* exponent bias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

vt_status vt_tensor_validate(const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: tensor descriptor is NULL", what);
    if ((unsigned)t->dtype >= VT_DTYPE_COUNT)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", what, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > VT_MAX_DIMS)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: ndim %d outside [0, %d]", what, (int)t->ndim,
                            VT_MAX_DIMS);
    /* The product of the nonzero sizes must fit too: shape arithmetic over
     * any subset of dims (rows x columns of an empty tensor) stays exact. */
    int64_t numel = 1, nonzero = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->sizes[i] < 0)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: negative size %lld at dim %d", what,
                                (long long)t->sizes[i], (int)i);
        if (t->sizes[i] && __builtin_mul_overflow(nonzero, t->sizes[i], &nonzero))
            return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: number of elements overflows int64", what);
        numel *= t->sizes[i];
    }
    if (numel > 0 && !t->data)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: data is NULL for a non-empty tensor", what);
    return VT_OK;
}

vt_tensor vt_contiguous_like(const vt_tensor *like, void *data) {
    vt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = like->dtype;
    t.ndim = like->ndim;
    int64_t stride = 1;
    for (int32_t d = like->ndim - 1; d >= 0; d--) {
        t.sizes[d] = like->sizes[d];
        t.strides[d] = stride;
        stride *= like->sizes[d] > 1 ? like->sizes[d] : 1;
    }
    return t;
}

vt_status vt_broadcast_check(const vt_tensor *t, int32_t ndim, const int64_t *sizes) {
    if (t->ndim > ndim)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "cannot broadcast a %d-dim tensor to %d dims", (int)t->ndim,
                            (int)ndim);
    const int32_t lead = ndim - t->ndim;
    for (int32_t i = lead; i < ndim; i++) {
        const int64_t s = t->sizes[i - lead];
        if (s != sizes[i] && s != 1)
            return vt_set_error(VT_ERR_INVALID_ARGUMENT,
                                "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                                "non-singleton dimension %d",
                                (long long)s, (long long)sizes[i], (int)i);
    }
    return VT_OK;
}

vt_status vt_check_operand(const char *name, const vt_tensor *t, const char *what) {
    if (!t) return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, what);
    vt_status s = vt_tensor_validate(t, what);
    if (s != VT_OK) return vt_error_prefix(s, name);
    if (!t->data && vt_tensor_numel(t) > 0)
        return vt_set_error(VT_ERR_INVALID_ARGUMENT, "%s: %s has no data", name, what);
    return VT_OK;
}

vt_status vt_check_input(const char *name, const vt_tensor *t, const char *what, const vt_tensor *out) {
    vt_status s = vt_check_operand(name, t, what);
    if (s != VT_OK) return s;
    s = vt_broadcast_check(t, out->ndim, out->sizes);
    return s == VT_OK ? VT_OK : vt_error_prefix(s, name);
}

vt_status vt_broadcast_to(const vt_tensor *t, int32_t ndim, const int64_t *sizes, vt_tensor *out) {
    /* Field by field: a struct copy of the 16-dim descriptor costs more
     * than the few dims an op has (this runs several times per op). Checked
     * first, then written from the last dim down, so out may be t itself. */
    vt_status s = vt_broadcast_check(t, ndim, sizes);
    if (s != VT_OK) return s;
    const int32_t lead = ndim - t->ndim;
    out->data = t->data;
    out->dtype = t->dtype;
    out->offset = t->offset;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        const int keep = i >= lead && t->sizes[i - lead] == sizes[i];
        out->strides[i] = keep ? t->strides[i - lead] : 0;
        out->sizes[i] = sizes[i];
    }
    out->ndim = ndim;
    return VT_OK;
}
