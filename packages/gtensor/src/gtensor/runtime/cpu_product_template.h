    using gtcpu::Int;
    constexpr int L = gtcpu::VEC_BYTES / sizeof(T);  // lanes of one native vector
    constexpr long long PW = 2 * L;    // width of a packed panel of b
    // On AMD Zen 3 / 4 the adds have pipes of their own beside the two 256-bit FMA pipes, and
    // plain's separate multiply + add tiles run fastest tall: 14 rows x one vector per tile
    // (gtcpu::tall_tiles; the fused contract's tiles are 8 x 2 on every core). Tiles only
    // group independent outputs: no bit depends on this.
    const bool tall = $TALL && gtcpu::tall_tiles();
    // pack: gtcpu::NoPack, or a callable pack(pw, j0, w) writing op(b)'s panel of columns j0 ..
    // j0 + w into pw (pw[kk * PW + j], every kk < k, zero past w; the conv ops' im2col made
    // panel by panel, in L1): b is then never read
    constexpr bool custom = !std::is_same<typename std::decay<decltype(pack)>::type,
                                          gtcpu::NoPack>::value;
    // k runs in blocks of KC (a 32 KB slice of the panel stays in L1 across row tiles; 16 KB
    // with tall tiles, whose 14 rows of a take as much again); an output's accumulator goes to
    // c between blocks and comes back exactly, so its chain over k is the same one (k
    // ascending, one accumulator)
    const long long KC = (tall ? 16384 : 32768) / (PW * (long long)sizeof(T));
    // b's copied panels made in one pass over b's rows when b is large (read in order, not
    // a panel's k-steps n values apart: a new page every few k-steps)
    const bool rowpack = !custom && !tb && k * n * (long long)sizeof(T) > 262144;
    // rows in blocks of MC (a multiple of 8): a block's rows of a (512 KB) stay in L2 while
    // every panel of b passes (each panel is packed once per block)
    const long long MC = 8 * (((524288 / (k * (long long)sizeof(T) + 1)) + 7) / 8);
    // under ta: op(a)'s row blocks copied into groups of 8 rows (pa) or read in place
    const bool packa = ta && m * k * (long long)sizeof(T) > 131072 &&
                       (n > PW || m * (long long)sizeof(T) > 2048);
    // tall tiles of 14 rows, except from packed groups (8 rows each) and from rows of a whose
    // stride is a multiple of 4 KB (14 rows in one set of the 8-way L1: 8 rows, then)
    const bool tall14 = tall && !packa && (ta || (k * (long long)sizeof(T)) % 4096 != 0);
    // R rows of c from ar (op(a)[r, kk] at ar[r * rs + kk * ks]: rows of a, rs = k, ks = 1
    // (KS = 1); under ta, a packed group of 8 rows, rs = 1, ks = 8 (KS = 8), or a itself,
    // rs = 1, ks = m (KS = 0)), NV vectors of N lanes of panel columns from bp (row stride bs:
    // PW, or n for a panel read in place), the last one holding w real lanes when P (else all
    // N) (steps k0..k1 of the chain: k0 == 0 starts it, else it resumes from c)
    auto tile = [=](auto rows_, auto lanes_, auto nv_, auto part_, auto ks_,
                    const T* __restrict__ ar, const T* __restrict__ bp, T* __restrict__ cr,
                    long long k0, long long k1, int w, long long bs) {
        constexpr int R = decltype(rows_)::value, N = decltype(lanes_)::value,
                      NV = decltype(nv_)::value;
        constexpr bool P = decltype(part_)::value;
        constexpr long long KS = decltype(ks_)::value;
        const long long rs = KS == 1 ? k : 1, ks = KS == 0 ? m : KS;
        typedef typename gtcpu::Vec<T, N>::type V;
        V acc[R][NV];
        long long kk = k0;
        if (k0 == 0) {
            for (int v = 0; v < NV; ++v) {
                const V bv = gtcpu::vload<V>(bp + v * N);
                for (int r = 0; r < R; ++r) acc[r][v] = $FIRST;
            }
            kk = 1;
        } else {
            for (int r = 0; r < R; ++r)
                for (int v = 0; v < NV; ++v) {
                    if (P && v == NV - 1) {  // the real lanes only (the rest: never stored)
                        acc[r][v] = V{};
                        for (int l = 0; l < w; ++l) acc[r][v][l] = cr[r * n + v * N + l];
                    } else {
                        acc[r][v] = gtcpu::vload<V>(cr + r * n + v * N);
                    }
                }
        }
        for (; kk < k1; ++kk) {
            V bv[NV];
            for (int v = 0; v < NV; ++v) bv[v] = gtcpu::vload<V>(bp + kk * bs + v * N);
            for (int r = 0; r < R; ++r) {
                const T av = ar[r * rs + kk * ks];
                for (int v = 0; v < NV; ++v) acc[r][v] = $NEXT;
            }
        }
        for (int r = 0; r < R; ++r)
            for (int v = 0; v < NV; ++v) {
                if (P && v == NV - 1) {
                    for (int l = 0; l < w; ++l) cr[r * n + v * N + l] = acc[r][v][l];
                } else {
                    gtcpu::vstore(cr + r * n + v * N, acc[r][v]);
                }
            }
    };
    // rows r0.. (R of them), the columns j0..j1 (<= 2L) of the panel at pk (row stride bs);
    // under ta, op(a)'s rows from pa (the row block starting at rb packed in groups of 8 rows)
    // or a
    auto cols = [=](auto rows_, auto ks_, long long r0, const T* pk, long long bs, long long j0,
                    long long j1, long long k0, long long k1, const T* pa, long long rb) {
        constexpr long long KS = decltype(ks_)::value;
        const T* ar = KS == 0   ? a + r0 / m * m * k + r0 % m
                      : KS == 8 ? pa + (r0 - rb) / 8 * k * 8 + (r0 - rb) % 8
                                : a + r0 * k;
        T* cr = c + r0 * n + j0;
        const long long full = (j1 - j0) / L;
        const int w = (int)((j1 - j0) % L);  // lanes of a last, partial vector
        const std::false_type whole;
        const std::true_type part;
        if (full == 2 && tall) {  // the panel's two vectors, one tile each
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk + L, cr + L, k0, k1, L, bs);
        } else if (full == 2)
            tile(rows_, Int<L>{}, Int<2>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
        else if (full == 1 && w == 0)
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
        else if (full == 1)
            tile(rows_, Int<L>{}, Int<2>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
        else if (2 * w <= L)  // a half vector holds them
            tile(rows_, Int<L / 2>{}, Int<1>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
        else
            tile(rows_, Int<L>{}, Int<1>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
    };
    // op(a) read as rows of a, or (ta) from the packed groups or in place: the a-strides
    // constants where they can be; a ta known when compiled (gtcpu::Int<0> / Int<1>: a
    // product's caller) instantiates only the readings it can take (fewer tiles to compile)
    auto run = [=](auto rows_, long long r0, const T* pk, long long bs, long long j0,
                   long long j1, long long k0, long long k1, const T* pa, long long rb) {
        using TA = gtcpu::Flag<typename std::decay<decltype(ta)>::type>;
        if constexpr (!TA::can_be_true) {
            cols(rows_, Int<1>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
        } else if constexpr (!TA::can_be_false) {
            if (packa)
                cols(rows_, Int<8>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
            else
                cols(rows_, Int<0>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
        } else {
            if (packa)
                cols(rows_, Int<8>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
            else if (ta)
                cols(rows_, Int<0>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
            else
                cols(rows_, Int<1>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
        }
    };
    const long long rows = batch * m;
    if (k == 0) {
        for (long long i = 0; i < rows * n; ++i) c[i] = (T)0;
        return;
    }
    // Per batch: row blocks (a's rows stay in L2), column panels (each packed once, in the
    // first row block), k blocks (the packed panel's KC x 2L slice stays in L1 across rows),
    // rows inside. Rows [lo, hi) of c against panels [p0, p1) of b.
    auto block = [=](long long lo, long long hi, long long p0, long long p1) {
        // every panel [p0, p1) of one batch's b, packed once, at its first use (panel p at
        // (p - p0) * k * PW), in a buffer each thread keeps between launches (no page faults),
        // aligned to 64 bytes (whole-vector loads never straddle a cache line)
        auto aligned = [](std::vector<T>& buf, size_t need) {
            constexpr size_t slack = 64 / sizeof(T);  // room to align to 64 bytes
            if (buf.size() < need + slack) buf.resize(need + slack);
            return (T*)(((uintptr_t)buf.data() + 63) & ~(uintptr_t)63);
        };
        // a panel read in place takes one cache line per k-step, n * sizeof(T) bytes apart:
        // when that stride is a multiple of a large power of two (g bytes), its k lines fall
        // in 4096 / g sets of the 8-way L1 and evict each other once k * g > 8 * 4096 (the
        // im2col panels of 8 images of 8x8 positions: 4 KB apart, one set): copied then
        const long long row_bytes = n * (long long)sizeof(T);
        const long long g = row_bytes & -row_bytes;  // its largest power-of-two divisor
        const bool spread = k * (g < 4096 ? g : 4096) <= 8 * 4096;
        auto direct = [=](long long w) {
            return !custom && !tb && w % L == 0 && spread &&
                   (m <= 16 || (m <= 32 && k * n * (long long)sizeof(T) <= 262144));
        };
        static thread_local std::vector<T> packed;
        // a caller's panels used by one row block alone: one slot, refilled (stays in L1)
        const bool one_slot = custom && batch == 1 && hi - lo <= MC;
        T* pks = aligned(packed, (size_t)((one_slot ? 1 : p1 - p0) * k * PW));
        static thread_local std::vector<T> apacked;  // under ta: one row block of op(a)
        T* pa = packa ? aligned(apacked, (size_t)(MC * k)) : nullptr;
        for (long long s0 = lo; s0 < hi;) {  // the rows of one batch at a time
            const long long bi = s0 / m, send = hi < (bi + 1) * m ? hi : (bi + 1) * m;
            if (rowpack) {  // every copied panel [p0, p1) of b[bi] (not those read in
                // place), k-step by k-step: b[bi] read row by row, zero-padded to PW columns
                const T* bb = b + bi * k * n;
                for (long long kk = 0; kk < k; ++kk)
                    for (long long p = p0; p < p1 && p * PW < n; ++p) {
                        const long long j0 = p * PW, w = j0 + PW < n ? PW : n - j0;
                        if (direct(w)) continue;
                        T* pw = pks + (p - p0) * k * PW + kk * PW;
                        if (w == PW) {
                            std::memcpy(pw, bb + kk * n + j0, PW * sizeof(T));
                        } else {
                            std::memcpy(pw, bb + kk * n + j0, (size_t)w * sizeof(T));
                            std::memset(pw + w, 0, (size_t)(PW - w) * sizeof(T));
                        }
                    }
            }
            for (long long rb = s0; rb < send; rb += MC) {  // row blocks: a's rows stay in L2
                const long long rbe = rb + MC < send ? rb + MC : send;
                if (packa) {  // op(a)'s rows rb..rbe: columns of a[bi], copied (exactly) in
                    // groups of 8 rows, k-steps contiguous (pa[(g * k + kk) * 8 + r % 8]),
                    // reading each row of a[bi] contiguously
                    const T* ab = a + bi * m * k + (rb - bi * m);
                    const long long w = rbe - rb;
                    for (long long g0 = 0; g0 < w; g0 += 8) {
                        const long long gw = w - g0 < 8 ? w - g0 : 8;
                        T* pg = pa + g0 * k;
                        for (long long kk = 0; kk < k; ++kk)
                            for (long long r = 0; r < gw; ++r) pg[kk * 8 + r] = ab[kk * m + g0 + r];
                    }
                }
                for (long long p = p0; p < p1 && p * PW < n; ++p) {
                    const long long j0 = p * PW, j1 = j0 + PW < n ? j0 + PW : n, w = j1 - j0;
                    T* pw = pks + (one_slot ? 0 : (p - p0) * k * PW);
                    // few rows (m <= 16, or m <= 32 with b[bi] in L2: at most 4 row tiles use
                    // a panel): a panel of whole vectors is read in place (row stride n), its
                    // copy would cost as much as the loads it saves
                    const bool dir = direct(w);
                    const T* pk = dir ? b + bi * k * n + j0 : pw;
                    const long long bs = dir ? n : PW;  // the panel's row stride
                    if constexpr (custom) {
                        if (rb == s0) pack(pw, j0, w);  // first use: the caller's panel
                    } else if (rb == s0 && !tb && !dir && !rowpack) {  // first use: an exact copy of
                        // b[bi][:, j0:j1], zero-padded to PW columns
                        const T* bb = b + bi * k * n + j0;
                        if (w == PW)  // a constant size: inlined vector moves
                            for (long long kk = 0; kk < k; ++kk)
                                std::memcpy(pw + kk * PW, bb + kk * n, PW * sizeof(T));
                        else
                            for (long long kk = 0; kk < k; ++kk) {
                                std::memcpy(pw + kk * PW, bb + kk * n, (size_t)w * sizeof(T));
                                std::memset(pw + kk * PW + w, 0, (size_t)(PW - w) * sizeof(T));
                            }
                    } else if (rb == s0 && tb) {  // op(b) = b[bi]^T: rows j0..j1 of b[bi], gathered
                        // a cache line of k-steps at a time (KB), each row of b read a line
                        // at a time; zero-padded to PW columns
                        constexpr long long KB = 64 / sizeof(T);
                        const T* bb = b + bi * k * n + j0 * k;
                        for (long long kb = 0; kb < k; kb += KB) {
                            const long long ke = kb + KB < k ? kb + KB : k;
                            for (long long j = 0; j < w; ++j)
                                for (long long kk = kb; kk < ke; ++kk)
                                    pw[kk * PW + j] = bb[j * k + kk];
                            for (long long j = w; j < PW; ++j)
                                for (long long kk = kb; kk < ke; ++kk) pw[kk * PW + j] = (T)0;
                        }
                    }
                    for (long long k0 = 0; k0 < k; k0 += KC) {
                        const long long k1 = k0 + KC < k ? k0 + KC : k;
                        long long r = rb;
                        while (r < rbe) {
                            const long long left = rbe - r;
                            if (tall14 && left >= 14) {
                                run(Int<14>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 14;
                            } else if (left >= 8) {
                                run(Int<8>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 8;
                            } else if (left >= 6) {
                                run(Int<6>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 6;
                            } else if (left >= 4) {
                                run(Int<4>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 4;
                            } else if (left >= 2) {
                                run(Int<2>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 2;
                            } else {
                                run(Int<1>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 1;
                            }
                        }
                    }
                }
            }
            s0 = send;
        }
    };
    // Threads split the panels of one (batch-free) product when it has at least as many panels
    // as 8-row tiles, or at least 4 per thread unless op(a) is packed and larger than b: each
    // panel is then packed (copied, or under tb gathered) by one thread, where split rows
    // would have every thread pack all of b (200x1024x512 f32 on 2 threads: 69 -> 77 G
    // multiply-adds/s under tb, 161 -> 190 without it; 512^3: +3-8%); a packed op(a) (ta)
    // would be packed whole by every thread instead, which costs more where a is the larger
    // (1024x200x512 ta: rows stay split). Otherwise they split the rows. Either way each
    // output is computed whole by one thread.
    // A multiply-add counts as 8 / L units of the split threshold (Shared::parallel_work, set
    // for maps: about four units per element): 1 in f64, 1/2 in f32 (AVX-512), so a product is
    // split from 16 K f64 / 32 K f32 multiply-adds (cpu_runtime.h's DEFAULT_PARALLEL_WORK,
    // 16 K: since the pool's workers spin between launches, 64^3 and 200x64x32 f64 run 1.2x /
    // 1.4x as fast split; under the sleeping pool's 4 M threshold they ran 0.8-1.2x, and
    // products split from 512 K f64 multiply-adds; split from 2 K, 16^3 took 8.2 us on 2
    // threads against 6.7 on one).
    const long long panels = (n + PW - 1) / PW;
    if (batch == 1 && (panels >= (rows + 7) / 8 ||
                       (panels >= 4 * gtcpu::thread_count() && (tb || !packa || n >= m))))
        $SPLIT(panels, k * PW * rows * 8 / L,
               [=](long long lo, long long hi) { block(0, rows, lo, hi); });
    else if (tb && rows < 16 * gtcpu::thread_count())
        // under tb split rows would each gather all of b (k x n) for fewer than two 8-row
        // tiles of products (the conv weight gradient of 1 -> 16 channels at 8x8, 32 images:
        // 9 rows, k = 2048: 51 us on one thread, 74-214 us on two)
        block(0, rows, 0, panels);
    else
        $SPLIT(rows, k * n * 8 / L,
               [=](long long lo, long long hi) { block(lo, hi, 0, panels); });