/* Loaded with dlopen by unwind_target's "dlopen" mode, after the profiler attached. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void dl_call(void (*leaf)(void))
{
	volatile long pad[4];
	pad[0] = 1;
	leaf();
	KEEP_FRAME();
	pad[1] = pad[0];
}
