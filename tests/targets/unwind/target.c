/* Known native stacks for the unwinder's tests, built without frame pointers (see Makefile).
 *
 *   unwind_target MODE [ARG]     prints "ready MODE" once set up, then burns CPU in c() until killed
 *
 * MODE chain   main -> a -> b -> c
 *      qsort   main -> a -> lib_sort (libunwlib.so) -> qsort (libc) -> cmp -> c
 *      drap    main -> a -> realign (stack realigned through gcc's DRAP, CFA = *(rbp - 8)) -> c
 *      debug   main -> a -> via_debug_frame (CFI only in .debug_frame) -> c
 *      deep N  main -> a -> rec x N -> c
 *      dlopen  waits for a line on stdin, dlopens libunwdl.so, prints "loaded", then
 *              main -> a -> dl_call (libunwdl.so) -> c
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone, used))
/* An empty asm after a call keeps gcc from turning it into a tail call (which would drop the frame). */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

extern void lib_sort(int (*cmp)(const void *, const void *));
extern void realign(int n, void (*leaf)(void));
extern void via_debug_frame(void (*leaf)(void));

volatile unsigned long sink;

NOINLINE void c(void)
{
	for (unsigned long i = 0; i < 20000; i++)
		sink += i * i;
	KEEP_FRAME();
}

NOINLINE int cmp(const void *x, const void *y)
{
	c();
	KEEP_FRAME();
	return *(const int *)x - *(const int *)y;
}

NOINLINE void b(void)
{
	c();
	KEEP_FRAME();
}

NOINLINE void rec(int n)
{
	if (n > 0)
		rec(n - 1);
	else
		c();
	KEEP_FRAME();
}

static const char *mode;
static int depth;
static void (*dl_call)(void (*leaf)(void));

NOINLINE void a(void)
{
	if (!strcmp(mode, "chain"))
		b();
	else if (!strcmp(mode, "qsort"))
		lib_sort(cmp);
	else if (!strcmp(mode, "drap"))
		realign(64, c);
	else if (!strcmp(mode, "debug"))
		via_debug_frame(c);
	else if (!strcmp(mode, "dlopen"))
		dl_call(c);
	else
		rec(depth);
	KEEP_FRAME();
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s chain|qsort|drap|debug|deep N\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	depth = argc > 2 ? atoi(argv[2]) : 200;
	alarm(120); /* never outlive a test that forgot to kill us */
	printf("ready %s\n", mode);
	fflush(stdout);
	if (!strcmp(mode, "dlopen")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		void *h = dlopen("libunwdl.so", RTLD_NOW); /* found through the executable's $ORIGIN rpath */
		if (!h || !(dl_call = (void (*)(void (*)(void)))dlsym(h, "dl_call"))) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		printf("loaded\n");
		fflush(stdout);
	}
	for (;;)
		a();
}
