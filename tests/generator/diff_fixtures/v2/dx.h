/* The tiny vendor library of v1/dx.h, one release later: every kind of change the diff reports. */
#ifndef DX_H
#define DX_H
#include <stddef.h>
#include <stdint.h>

#define DX_MAJOR 1
#define DX_MINOR 1
#define DX_PATCH 0
#define DX_VERSION (DX_MAJOR * 1000 + DX_MINOR * 100 + DX_PATCH)
#define DX_MAX_DIMS 12
#define DX_NEW_LIMIT 16

#define DX_DEPRECATED __attribute__((deprecated))

typedef enum { DX_OK = 0, DX_BAD_PARAM = 2000, DX_NOT_SUPPORTED = 3000, DX_INTERNAL = 4000 } dxStatus_t;
typedef enum { DX_FLOAT = 0, DX_HALF = 1, DX_BFLOAT = 2, DX_FP8 = 7 } dxDataType_t;
typedef enum { DX_MODE_FAST = 0, DX_MODE_EXACT = 1 } dxMode_t;

typedef struct dxContext *dxHandle_t;
typedef struct dxGraphStruct *dxGraph_t;

typedef struct {
    int n;
    double scale;
    int flags;
} dxParams_t;

typedef struct dxPairStruct {
    union dxValue {
        int i;
        float f;
        double d;
    } value;
    int tag;
} dxPair_t;

typedef void (*dxCallback_t)(dxStatus_t status, void *userData, int64_t step);

const char *dxGetErrorString(dxStatus_t status);
size_t dxGetVersion(void);
dxStatus_t dxCreate(dxHandle_t *handle);
dxStatus_t dxScale(dxHandle_t handle, const void *alpha, void *x, int64_t n);
DX_DEPRECATED dxStatus_t dxCopy(dxHandle_t handle, const void *x, void *y);
dxStatus_t dxQuery(dxHandle_t handle, void *userData);
dxStatus_t dxSetCallback(dxHandle_t handle, dxCallback_t callback, void *userData);
dxStatus_t dxSetParams(dxHandle_t handle, const dxParams_t *params, const dxPair_t *pair);
dxStatus_t dxFuse(dxHandle_t handle, void *workSpace, size_t workSpaceSize);
dxStatus_t dxExecute(dxHandle_t handle, dxGraph_t graph, dxMode_t mode, void *buffer);

#endif
