/*
 * The ABI of dlpack.h (major version 1), for both sides of the protocol:
 * dlpack.c takes tensors (the consumer), dlpack_export.c gives a buffer
 * of ours out as one (the producer).
 */
#ifndef CLEARPAGES_DLPACK_ABI_H
#define CLEARPAGES_DLPACK_ABI_H

#include <stdint.h>

typedef struct {
    uint32_t major, minor;
} DLPackVersion;

typedef struct {
    int32_t device_type, device_id;
} DLDevice;

typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;           /* in elements; NULL: C order (before 1.0) */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ull << 1)

/* DLPack's C exchange API (dlpack.h 1.2 and later): a table a producer's
 * type offers as a capsule named "dlpack_exchange_api", its
 * __dlpack_c_exchange_api__.  dlpack.c reads its stable header and the
 * entry that describes a tensor in place (a DLTensor filled without an
 * export, valid until Python code runs); the others are opaque here. */
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef int (*dltensor_from_fn)(void *py_object, DLTensor *out);

typedef struct {
    DLPackExchangeAPIHeader header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    dltensor_from_fn dltensor_from_py_object_no_sync;
    void *current_work_stream;
} DLPackExchangeAPI;

#endif
