
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// v16: 16 float lanes held as 16/LANES vectors of the widest width the target has in registers (16 with
// AVX-512, 8 with AVX, 4 otherwise), so the compiler keeps them in registers at every ISA level (a 64-byte
// GCC vector without AVX-512 has no register form and lives on the stack). Every operation is per lane, so
// a lane's result does not depend on the width: the same bits at every level with the same FMA contraction.
#if defined(__AVX512F__)
constexpr int LANES = 16;
#elif defined(__AVX__)
constexpr int LANES = 8;
#define LANES_ARE_TWO_REGISTERS 1
#else
constexpr int LANES = 4;
#endif
constexpr int PARTS = 16 / LANES;
// v16 accumulators a register tile may hold and leave room for its operands: half the vector registers
// (32 with AVX-512, 16 below it) at this width.
constexpr int ACC16 = LANES == 16 ? 16 : LANES == 8 ? 4 : 2;
typedef float vpart __attribute__((vector_size(4 * LANES)));
typedef int32_t ipart __attribute__((vector_size(4 * LANES)));
struct v16 { vpart p[PARTS]; };
struct i16 { ipart p[PARTS]; };

#define STRATA_LANEWISE(R, NAME, A, B, EXPR) \
  static inline R NAME(A a, B b) { R r; for (int i = 0; i < PARTS; ++i) r.p[i] = EXPR; return r; }
STRATA_LANEWISE(v16, operator+, v16, v16, a.p[i] + b.p[i])
STRATA_LANEWISE(v16, operator-, v16, v16, a.p[i] - b.p[i])
STRATA_LANEWISE(v16, operator*, v16, v16, a.p[i] * b.p[i])
STRATA_LANEWISE(v16, operator+, v16, float, a.p[i] + b)
STRATA_LANEWISE(v16, operator-, v16, float, a.p[i] - b)
STRATA_LANEWISE(v16, operator*, v16, float, a.p[i] * b)
STRATA_LANEWISE(v16, operator*, float, v16, a * b.p[i])
STRATA_LANEWISE(i16, operator<, v16, v16, a.p[i] < b.p[i])
STRATA_LANEWISE(i16, operator>, v16, v16, a.p[i] > b.p[i])
STRATA_LANEWISE(i16, operator+, i16, int32_t, a.p[i] + b)
STRATA_LANEWISE(i16, operator<<, i16, int, a.p[i] << b)
STRATA_LANEWISE(i16, operator>=, i16, int32_t, a.p[i] >= b)
STRATA_LANEWISE(i16, operator<, i16, int32_t, a.p[i] < b)
STRATA_LANEWISE(i16, operator&, i16, i16, a.p[i] & b.p[i])
#undef STRATA_LANEWISE
static inline v16& operator+=(v16& a, v16 b) { a = a + b; return a; }
static inline v16 select(i16 m, v16 a, v16 b) {  // per lane: m ? a : b
  v16 r;
  for (int i = 0; i < PARTS; ++i) r.p[i] = m.p[i] ? a.p[i] : b.p[i];
  return r;
}
static inline float select(bool m, float a, float b) { return m ? a : b; }
static inline v16 load16(const float* p) {
  v16 v;
  for (int i = 0; i < PARTS; ++i) std::memcpy(&v.p[i], p + LANES * i, sizeof(vpart));
  return v;
}
static inline void store16(float* p, v16 v) {
  for (int i = 0; i < PARTS; ++i) std::memcpy(p + LANES * i, &v.p[i], sizeof(vpart));
}
static inline v16 splat(float x) { return v16{} + x; }
static inline i16 lane_index() {  // 0, 1, ..., 15
  i16 v;
  for (int i = 0; i < PARTS; ++i)
    for (int l = 0; l < LANES; ++l) v.p[i][l] = LANES * i + l;
  return v;
}

static inline int32_t round_to_int(float r) { return static_cast<int32_t>(r); }
static inline i16 round_to_int(v16 r) {
  i16 v;
  for (int i = 0; i < PARTS; ++i) v.p[i] = __builtin_convertvector(r.p[i], ipart);
  return v;
}
static inline float bits_to_float(int32_t b) { float f; std::memcpy(&f, &b, sizeof f); return f; }
static inline v16 bits_to_float(i16 b) {
  v16 v;
  for (int i = 0; i < PARTS; ++i) v.p[i] = reinterpret_cast<vpart>(b.p[i]);
  return v;
}

// e^x for x <= 0 (a softmax's max-subtracted scores), for a float or 16 lanes, in a form the compiler
// vectorizes: x = r ln2 + f with r rounded to nearest (ln2 in two parts, as Cephes does) and |f| <= ln2/2,
// e^f by its Taylor series to f^7 (error < 6e-9), times 2^r built in the exponent bits; below -87.3 it
// returns 2^-126 (a weight of ~1e-38). Always inlined at the AVX level, where 16 lanes are two registers: GCC
// otherwise called it with the lanes through memory, and a prompt chunk's softmax took half the chunk op's time.
#if defined(LANES_ARE_TWO_REGISTERS)
#define STRATA_EXP_INLINE __attribute__((always_inline))
#else
#define STRATA_EXP_INLINE
#endif
template <typename F>
STRATA_EXP_INLINE static inline F exp_nonpositive(F x) {
  const F floor_ = F{} - 87.3f;
  x = select(x < floor_, floor_, x);
  const F r = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const F f = (x - r * 0.693359375f) + r * 2.12194440e-4f;
  F e = F{} + 1.0f / 5040.0f;
  e = e * f + 1.0f / 720.0f;
  e = e * f + 1.0f / 120.0f;
  e = e * f + 1.0f / 24.0f;
  e = e * f + 1.0f / 6.0f;
  e = e * f + 0.5f;
  e = e * f + 1.0f;
  e = e * f + 1.0f;
  return e * bits_to_float((round_to_int(r) + 127) << 23);
}
