// A miniature of PyTorch's autograd, for the forward <-> backward tests: "forward" calls create nodes
// (C++ classes shaped like torch::autograd::Node: virtual methods, enable_shared_from_this, the sequence
// number first) that take numbers from a thread-local counter; "backward" hands the nodes to a worker
// thread, which runs each through Engine::evaluate(graph_task, node) and launches through the real CUDA
// runtime. The launches of a node's apply() belong to the Python line that created the node.
#include <dlfcn.h>
#include <pthread.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

typedef int (*launch_fn)(const void *, uint64_t, uint32_t, uint64_t, uint32_t, void **, size_t, void *);
static launch_fn launch;

extern "C" __attribute__((noinline)) void matmul_backward_kernel(void) { __asm__ volatile(""); }
extern "C" __attribute__((noinline)) void relu_backward_kernel(void) { __asm__ volatile(""); }

static void launch_stub(void (*stub)(void)) {
    uint64_t one = 1 | (1ull << 32);
    launch((const void *)stub, one, 1, one, 1, nullptr, 0, nullptr);
}

namespace demo {

static thread_local uint64_t counter;
__attribute__((noinline, visibility("default"))) uint64_t next_seq() { return counter++; }

struct Node : std::enable_shared_from_this<Node> {
    Node() : seq(next_seq()) {}
    virtual ~Node() = default;
    virtual void apply() = 0;
    const uint64_t seq;
};

struct MatmulBackward : Node {
    void apply() override { launch_stub(matmul_backward_kernel); launch_stub(matmul_backward_kernel); }
};
struct ReluBackward : Node {
    void apply() override { launch_stub(relu_backward_kernel); }
};

struct Engine {
    __attribute__((noinline, visibility("default"))) void evaluate(void *graph_task, Node *node);
};
void Engine::evaluate(void *graph_task, Node *node) {
    (void)graph_task;
    node->apply();
}

}  // namespace demo

static std::vector<std::shared_ptr<demo::Node>> graph;
static demo::Engine engine;

extern "C" {

int nodes_init(const char *cudart) {
    void *lib = dlopen(cudart, RTLD_NOW);
    return lib && (launch = (launch_fn)dlsym(lib, "cudaLaunchKernel")) ? 0 : -1;
}

__attribute__((noinline)) void nodes_matmul(void) { graph.push_back(std::make_shared<demo::MatmulBackward>()); }
__attribute__((noinline)) void nodes_relu(void) { graph.push_back(std::make_shared<demo::ReluBackward>()); }

/* Runs the nodes, newest first, on a worker thread, and waits for it (like loss.backward()). */
__attribute__((noinline)) int nodes_backward(void) {
    std::thread worker([] {
        pthread_setname_np(pthread_self(), "nodes-bwd");
        for (auto it = graph.rbegin(); it != graph.rend(); ++it)
            engine.evaluate(nullptr, it->get());
    });
    worker.join();
    graph.clear();
    return 0;
}
}
