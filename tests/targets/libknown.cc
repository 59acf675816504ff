// A shared library with known symbols for the symbolization tests: C names, a C++ name in a namespace,
// a static (local) function, each with a known size.
extern "C" {
__attribute__((noinline)) int known_alpha(int x) { return x * 3 + 1; }
__attribute__((noinline)) int known_beta(int x) { return known_alpha(x) - 2; }
}

namespace deepctx_test {
struct Widget {
    __attribute__((noinline)) static long spin(long n);
};
long Widget::spin(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += i ^ n;
    return s;
}
}  // namespace deepctx_test

static __attribute__((noinline)) int hidden_helper(int x) { return x + 42; }
extern "C" int call_hidden(int x) { return hidden_helper(x); }
