/* The key of a public op's call, as dnnbind.highlevel.plans._key builds it, built in C: a repeated
 * call's whole shape-and-argument work is this key and one dictionary lookup, and building the tuple
 * in Python (a list, a map over the argument types, an append per array) cost most of it. Optional:
 * plans.py falls back to its Python _key, which this must equal (tests/highlevel/test_plans.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *shape_name, *dtype_name;

/* key(op, arrays, arguments) -> (op, arguments, *types of arguments, then per array None or
 * (type, shape, dtype) flattened). AttributeError for an array without shape or dtype, TypeError
 * when arrays or arguments are not tuples. */
static PyObject *key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyTuple_CheckExact(args[1]) || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "key(op, arrays, arguments): arrays and arguments are tuples");
        return NULL;
    }
    PyObject *op = args[0], *arrays = args[1], *arguments = args[2];
    Py_ssize_t na = PyTuple_GET_SIZE(arrays), ng = PyTuple_GET_SIZE(arguments), size = 2 + ng;
    for (Py_ssize_t i = 0; i < na; i++) size += PyTuple_GET_ITEM(arrays, i) == Py_None ? 1 : 3;
    PyObject *out = PyTuple_New(size);
    if (!out) return NULL;
    Py_ssize_t k = 0;
    Py_INCREF(op);
    PyTuple_SET_ITEM(out, k++, op);
    Py_INCREF(arguments);
    PyTuple_SET_ITEM(out, k++, arguments);
    for (Py_ssize_t i = 0; i < ng; i++) {
        PyObject *type = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(arguments, i));
        Py_INCREF(type);
        PyTuple_SET_ITEM(out, k++, type);
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(arrays, i);
        if (a == Py_None) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(out, k++, Py_None);
            continue;
        }
        PyObject *type = (PyObject *)Py_TYPE(a);
        Py_INCREF(type);
        PyTuple_SET_ITEM(out, k++, type);
        PyObject *shape = PyObject_GetAttr(a, shape_name);
        if (!shape) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, k++, shape);
        PyObject *dtype = PyObject_GetAttr(a, dtype_name);
        if (!dtype) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, k++, dtype);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"key", (PyCFunction)(void (*)(void))key, METH_FASTCALL, "The plan key of a call (dnnbind.highlevel.plans._key)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plankey", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__plankey(void) {
    shape_name = PyUnicode_InternFromString("shape");
    dtype_name = PyUnicode_InternFromString("dtype");
    if (!shape_name || !dtype_name) return NULL;
    return PyModule_Create(&module);
}
