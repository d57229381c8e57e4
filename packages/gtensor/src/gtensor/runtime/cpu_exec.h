// gtensor cpu runtime: the plan interpreter (gtcpu_exec) and the CPython door of a compiled
// cpu module. Appended by gtensor.runtime.cpu after the module's launchers, whose call table
// GTCPU_CALLS / GTCPU_NKERNELS it indexes (so it is not a standalone header).
static long long gtcpu_data_offset = 16;
extern "C" void gtcpu_set_data_offset(long long off) { gtcpu_data_offset = off; }
extern "C" long long gtcpu_set_parallel_work(long long work)
{
    const long long old = gtcpu::PARALLEL_WORK;
    if (work > 0) gtcpu::PARALLEL_WORK = work;
    return old;
}
extern "C" int gtcpu_set_matmul_tiles(int form)
{
    const int old = gtcpu::MATMUL_TILES;
    if (form >= gtcpu::TILES_BY_HOST && form <= gtcpu::TILES_WIDE) gtcpu::MATMUL_TILES = form;
    return old;
}

// plan = [slots, nbytes[slots], launches, then per launch: kernel index, nargs,
// nargs x (kind, value)]; kind 0: value is a slot (an array object) whose data pointer is
// passed; 1: the value itself. The last slot is the output: it must not overlap an input.
// Status: 0 ok, 1 a bad plan, 2 the output overlaps an input.
extern "C" int gtcpu_exec(const long long* plan, const void* const* objs, long long nobjs)
{
    const long long slots = *plan++;
    const long long* nbytes = plan;
    plan += slots;
    if (slots != nobjs || slots > 64) return 1;
    char* data[64];
    for (long long i = 0; i < slots; ++i)
        std::memcpy(&data[i], (const char*)objs[i] + gtcpu_data_offset, sizeof data[i]);
    const long long o = slots - 1;
    for (long long i = 0; i < o; ++i)
        if (nbytes[i] > 0 && nbytes[o] > 0 && data[i] < data[o] + nbytes[o] &&
            data[o] < data[i] + nbytes[i])
            return 2;
    gtcpu::FpEnv env;
    const long long launches = *plan++;
    for (long long l = 0; l < launches; ++l) {
        const long long index = *plan++, nargs = *plan++;
        long long store[16];
        void* argv[16];
        if (index < 0 || index >= GTCPU_NKERNELS || nargs > 16) return 1;
        for (long long i = 0; i < nargs; ++i) {
            const long long kind = *plan++, value = *plan++;
            if (kind == 0) {
                if (value < 0 || value >= slots) return 1;
                std::memcpy(&store[i], &data[value], sizeof store[i]);
            } else {
                store[i] = value;
            }
            argv[i] = &store[i];
        }
        const int status = GTCPU_CALLS[index](argv);
        if (status) return status;
    }
    return 0;
}

#ifdef GTCPU_PYTHON
// run(plan, *arrays) -> status: the eager door without ctypes (METH_FASTCALL, GIL released).
static PyObject* gtcpu_py_run(PyObject*, PyObject* const* args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "run(plan, *arrays): missing the plan");
        return NULL;
    }
    const long long* plan = (const long long*)PyLong_AsVoidPtr(args[0]);
    if (plan == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "run: null plan");
        return NULL;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = gtcpu_exec(plan, (const void* const*)(args + 1), (long long)(nargs - 1));
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(status);
}

static PyMethodDef gtcpu_methods[] = {
    {"run", (PyCFunction)(void (*)(void))gtcpu_py_run, METH_FASTCALL,
     "run(plan, *arrays) -> status"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef gtcpu_module = {PyModuleDef_HEAD_INIT, "gtensor_cpu_module", NULL, -1,
                                          gtcpu_methods};
extern "C" PyObject* PyInit_gtensor_cpu_module(void) { return PyModule_Create(&gtcpu_module); }
#endif
