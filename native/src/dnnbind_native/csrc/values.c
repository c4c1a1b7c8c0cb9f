/* The generated wrappers' fast check of their integer and enum arguments, in C: values_ok(spec, *values)
 * is True when every value fits its C integer type (spec[0]: the struct format letters, one per value)
 * and every enum parameter (spec[1]: per value its enum class, or None) got an int or a member of its
 * own class; False sends the wrapper to checks.check_values, which names what is wrong. It must answer
 * as checks._values_ok_python does (one struct pack and a type test per enum, which cost most of a
 * checked call's overhead); tests/runtime/test_checks.py compares the two. Optional: without the
 * compiled module the wrappers use the Python function. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

/* Whether integer ``v`` (an int, or what struct would take as one: anything with __index__) fits the
 * C type of struct format letter ``code`` (native sizes). */
static int fits(PyObject *v, char code) {
    PyObject *index = PyLong_CheckExact(v) ? (Py_INCREF(v), v) : PyNumber_Index(v);
    if (!index) {
        PyErr_Clear();
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(index, &overflow);
    int ok = 0;
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
    } else if (overflow > 0 && (code == 'Q' || code == 'N')) {        /* past LLONG_MAX: unsigned 64-bit? */
        PyLong_AsUnsignedLongLong(index);
        ok = !PyErr_Occurred();
        PyErr_Clear();
    } else if (overflow == 0) {
        switch (code) {
        case 'b': ok = x >= SCHAR_MIN && x <= SCHAR_MAX; break;
        case 'B': ok = x >= 0 && x <= UCHAR_MAX; break;
        case 'h': ok = x >= SHRT_MIN && x <= SHRT_MAX; break;
        case 'H': ok = x >= 0 && x <= USHRT_MAX; break;
        case 'i': ok = x >= INT_MIN && x <= INT_MAX; break;
        case 'I': ok = x >= 0 && x <= (long long)UINT_MAX; break;
        case 'q': case 'n': ok = 1; break;
        case 'Q': case 'N': ok = x >= 0; break;
        default: ok = 0;
        }
    }
    Py_DECREF(index);
    return ok;
}

static PyObject *values_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) < 2
            || !PyBytes_Check(PyTuple_GET_ITEM(args[0], 0)) || !PyTuple_Check(PyTuple_GET_ITEM(args[0], 1))
            || PyBytes_GET_SIZE(PyTuple_GET_ITEM(args[0], 0)) != nargs - 1
            || PyTuple_GET_SIZE(PyTuple_GET_ITEM(args[0], 1)) != nargs - 1) {
        PyErr_SetString(PyExc_TypeError, "values_ok(spec, *values): spec is (format letters, enum classes), one each");
        return NULL;
    }
    const char *codes = PyBytes_AS_STRING(PyTuple_GET_ITEM(args[0], 0));
    PyObject *enums = PyTuple_GET_ITEM(args[0], 1);
    for (Py_ssize_t i = 1; i < nargs; i++) {
        PyObject *v = args[i], *enum_class = PyTuple_GET_ITEM(enums, i - 1);
        if (enum_class != Py_None && Py_TYPE(v) != &PyLong_Type && (PyObject *)Py_TYPE(v) != enum_class)
            Py_RETURN_FALSE;
        if (!fits(v, codes[i - 1])) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"values_ok", (PyCFunction)(void (*)(void))values_ok, METH_FASTCALL,
     "values_ok(spec, *values) -> whether every value fits its C type and every enum its class"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_values", NULL, -1, methods};

PyMODINIT_FUNC PyInit__values(void) { return PyModule_Create(&module); }
