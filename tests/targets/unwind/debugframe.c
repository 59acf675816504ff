/* Built with -fno-asynchronous-unwind-tables -g: this function's CFI is only in .debug_frame. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void via_debug_frame(void (*leaf)(void))
{
	volatile long pad[8];
	pad[0] = 1;
	leaf();
	KEEP_FRAME();
	pad[1] = pad[0];
}
