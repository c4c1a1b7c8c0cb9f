/* The key of a public op's call, as dnnbind.highlevel.plans._python_key builds it, and the lookup of
 * its plan (plans._python_find), in C: a repeated call's whole shape-and-argument work is this key and
 * one dictionary lookup, and building the tuple in Python (a list, a map over the argument types, an
 * append per array) cost most of it. Optional: plans.py falls back to its Python functions, which these
 * must equal (tests/highlevel/test_plans.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *shape_name, *dtype_name, *plain_name;
static PyObject *entries, *tag_plain;      /* configure(): the plan cache and plans._plain */

/* key(op, arrays, arguments) -> (op, arguments, *types of arguments, then per array None or
 * (type, shape, dtype) flattened). AttributeError for an array without shape or dtype, TypeError
 * when arrays or arguments are not tuples. */
static PyObject *build_key(PyObject *op, PyObject *arrays, PyObject *arguments) {
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

static int check_arguments(const char *name, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_CheckExact(args[1]) || !PyTuple_CheckExact(args[2])) {
        PyErr_Format(PyExc_TypeError, "%s(op, arrays, arguments): arrays and arguments are tuples", name);
        return -1;
    }
    return 0;
}

static PyObject *key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_arguments("key", args, nargs)) return NULL;
    return build_key(args[0], args[1], args[2]);
}

/* configure(entries, plain): the dict of plans find() reads and the function that tags tuple and
 * zero-float arguments (plans._plain). */
static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "configure(entries, plain): a dict and a callable");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(entries, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(tag_plain, args[1]);
    Py_RETURN_NONE;
}

/* find(op, arrays, arguments) -> the plan of this call, or None (no plan yet; an array that is none, an
 * unhashable argument; a plan whose tagged arguments differ from this call's). */
static PyObject *find(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_arguments("find", args, nargs)) return NULL;
    if (!entries || !tag_plain) {
        PyErr_SetString(PyExc_RuntimeError, "find: configure() was not called");
        return NULL;
    }
    PyObject *k = build_key(args[0], args[1], args[2]);
    if (!k) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError) && !PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *plan = PyDict_GetItemWithError(entries, k);      /* borrowed */
    Py_DECREF(k);
    if (!plan) {
        if (!PyErr_Occurred()) Py_RETURN_NONE;
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
        PyErr_Clear();                                       /* an unhashable argument (a list) */
        Py_RETURN_NONE;
    }
    Py_INCREF(plan);
    PyObject *plain = PyObject_GetAttr(plan, plain_name);
    if (!plain) { Py_DECREF(plan); return NULL; }
    if (plain == Py_None) {
        Py_DECREF(plain);
        return plan;
    }
    PyObject *tagged = PyObject_CallOneArg(tag_plain, args[2]);
    int same = tagged ? PyObject_RichCompareBool(plain, tagged, Py_EQ) : -1;
    Py_DECREF(plain);
    Py_XDECREF(tagged);
    if (same < 0) { Py_DECREF(plan); return NULL; }
    if (!same) { Py_DECREF(plan); Py_RETURN_NONE; }
    return plan;
}

static PyMethodDef methods[] = {
    {"key", (PyCFunction)(void (*)(void))key, METH_FASTCALL, "The plan key of a call (plans._python_key)."},
    {"find", (PyCFunction)(void (*)(void))find, METH_FASTCALL, "The plan of a call or None (plans._python_find)."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, "find()'s plan dict and tagging function."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plankey", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__plankey(void) {
    shape_name = PyUnicode_InternFromString("shape");
    dtype_name = PyUnicode_InternFromString("dtype");
    plain_name = PyUnicode_InternFromString("plain");
    if (!shape_name || !dtype_name || !plain_name) return NULL;
    return PyModule_Create(&module);
}
