// gtensor cpu runtime library: the plan interpreter (gtcpu_exec), the call table the kernel
// libraries fill, the settings every kernel reads and the CPython door. Compiled after
// cpu_runtime.h (and its cpu_pool.h) into the runtime library (gtensor.runtime.cpu), which
// every kernel library is bound to: one pool and one set of settings per process.
constexpr long long GTCPU_MAX_KERNELS = 4096;
// kernel index -> its unpacking caller (gtcpu_call_<name> of the kernel's library), set by
// gtcpu_set_call when the library is loaded; null until then
static int (*GTCPU_CALLS[GTCPU_MAX_KERNELS])(void**) = {};
extern "C" int gtcpu_set_call(long long index, int (*call)(void**))
{
    if (index < 0 || index >= GTCPU_MAX_KERNELS) return 1;
    GTCPU_CALLS[index] = call;
    return 0;
}
// the state kernel libraries are bound to (their gtcpu_bind), and its size (checked there)
extern "C" void* gtcpu_shared() { return gtcpu::SHARED; }
extern "C" long long gtcpu_shared_size() { return (long long)sizeof(gtcpu::Shared); }
static long long gtcpu_data_offset = 16;
extern "C" void gtcpu_set_data_offset(long long off) { gtcpu_data_offset = off; }
extern "C" long long gtcpu_set_parallel_work(long long work)
{
    const long long old = gtcpu::SHARED->parallel_work;
    if (work > 0) gtcpu::SHARED->parallel_work = work;
    return old;
}
extern "C" int gtcpu_set_matmul_tiles(int form)
{
    const int old = gtcpu::SHARED->matmul_tiles;
    if (form >= gtcpu::TILES_BY_HOST && form <= gtcpu::TILES_WIDE)
        gtcpu::SHARED->matmul_tiles = form;
    return old;
}

// plan = [slots, nbytes[slots], launches, then per launch: kernel index, nargs,
// nargs x (kind, value)]; kind 0: value is a slot (an array object) whose data pointer is
// passed; 1: the value itself. The last slot is the output: it must not overlap an input.
// Status: 0 ok, 1 a bad plan, 2 the output overlaps an input, 3 a kernel whose library is not
// loaded (the Python side loads a plan's kernels before it encodes the plan).
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
        if (index < 0 || index >= GTCPU_MAX_KERNELS || nargs > 16) return 1;
        if (GTCPU_CALLS[index] == nullptr) return 3;
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
