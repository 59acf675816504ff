/* Built with -mstackrealign: the aligned buffer plus alloca make gcc realign the stack through a DRAP
 * register, so the CFA is *(rbp - 8) in the body and rbp is saved at rbp + 0. */
#include <alloca.h>

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void realign(int n, void (*leaf)(void))
{
	char buf[256] __attribute__((aligned(64)));
	volatile char *d = alloca(n);
	for (int i = 0; i < 256; i++)
		buf[i] = (char)n;
	d[0] = buf[n & 255];
	leaf();
	KEEP_FRAME();
}
