/*
 * The C side of clearpages._native that clearpages._fast imports: the table
 * of entry points (core/api.h) and the capsule it travels in, added to the
 * module when cffi creates it.  Included into the cffi module's source by
 * clearpages/_ffi_build.py, after CP_API_ROUTINE_ROWS (one {fn, job_fn} per
 * row of the routine table, in its order).
 */
#include "api.h"

static const struct cp_api cp_api_table = {
    .version = CP_API_VERSION,
    .size = sizeof(struct cp_api),
    .routines = {CP_API_ROUTINE_ROWS},
#define CP_API_ENTRY(name) .name = cp_##name,
    CP_API_FUNCTIONS(CP_API_ENTRY)
#undef CP_API_ENTRY
    .adapt_fast = &cp_adapt_fast_slot,
};

/* cffi's module initialization, then the capsule: the module is what
 * cffi made, with one attribute more, _C_API. */
static PyObject *(*const cp_cffi_init)(const char *, Py_ssize_t,
                                       const struct _cffi_type_context_s *) = _cffi_init;

static PyObject *cp_init_with_api(const char *name, Py_ssize_t version,
                                  const struct _cffi_type_context_s *ctx)
{
    PyObject *m = cp_cffi_init(name, version, ctx);
    if (!m)
        return NULL;
    PyObject *capsule = PyCapsule_New((void *)&cp_api_table, CP_API_CAPSULE, NULL);
    if (!capsule || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#define _cffi_init cp_init_with_api
