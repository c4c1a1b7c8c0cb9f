/* A tiny vendor library, version 1.0.0, for the API diff tests (v2/dx.h is its next release). */
#ifndef DX_H
#define DX_H
#include <stddef.h>
#include <stdint.h>

#define DX_MAJOR 1
#define DX_MINOR 0
#define DX_PATCH 0
#define DX_VERSION (DX_MAJOR * 1000 + DX_MINOR * 100 + DX_PATCH)
#define DX_MAX_DIMS 8
#define DX_OLD_LIMIT 4

#define DX_DEPRECATED __attribute__((deprecated))

typedef enum { DX_OK = 0, DX_BAD_PARAM = 1, DX_NOT_SUPPORTED = 2 } dxStatus_t;
typedef enum { DX_FLOAT = 0, DX_HALF = 1, DX_OLD_TYPE = 7 } dxDataType_t;

typedef struct dxContext *dxHandle_t;
typedef struct dxPlanStruct *dxPlan_t;

typedef struct {
    int n;
    float scale;
} dxParams_t;

typedef struct dxPairStruct {
    union dxValue {
        int i;
        float f;
    } value;
    int tag;
} dxPair_t;

typedef void (*dxCallback_t)(dxStatus_t status, void *userData);

const char *dxGetErrorString(dxStatus_t status);
size_t dxGetVersion(void);
dxStatus_t dxCreate(dxHandle_t *handle);
dxStatus_t dxScale(dxHandle_t handle, const void *alpha, void *x, int n);
dxStatus_t dxCopy(dxHandle_t handle, const void *x, void *y);
dxStatus_t dxQuery(dxHandle_t handle, int *userData);
dxStatus_t dxOldApi(dxHandle_t handle, void *x);
dxStatus_t dxPlanCreate(dxPlan_t *plan);
dxStatus_t dxSetCallback(dxHandle_t handle, dxCallback_t callback, void *userData);
dxStatus_t dxSetParams(dxHandle_t handle, const dxParams_t *params, const dxPair_t *pair);
#if DX_BETA_API
dxStatus_t dxFuse(dxHandle_t handle, void *workSpace, size_t workSpaceSize);
#endif

#endif
