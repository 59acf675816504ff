/* Shared library half of unwind_target: a frame in another file, calling back through libc's qsort. */
#include <stdlib.h>

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void lib_sort(int (*cmp)(const void *, const void *))
{
	int v[32];
	for (int i = 0; i < 32; i++)
		v[i] = (i * 7919) % 32;
	qsort(v, 32, sizeof(v[0]), cmp);
	KEEP_FRAME();
}
