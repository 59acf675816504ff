/* Cubins already in the process (cubin_scan.h). Every read goes through process_vm_readv on this process, so
 * memory that is not readable (or an object unloaded meanwhile) is an error, never a fault in the target. */
#define _GNU_SOURCE
#include "cubin_scan.h"

#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef EM_CUDA
#define EM_CUDA 190
#endif
#define MAX_SEGMENTS 4096
#define CHUNK (1u << 20)

struct segment {
    uintptr_t start;
    size_t size;
};

struct segments {
    struct segment seg[MAX_SEGMENTS];
    int n;
};

int cubin_copy(void *dst, const void *addr, size_t size) {
    struct iovec local = {dst, size};
    struct iovec remote = {(void *)addr, size};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : -1;
}

/* The readable PT_LOAD segments of every loaded object (the loader's lock is held only while they are listed). */
static int list_segments(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct segments *s = data;
    for (int i = 0; i < info->dlpi_phnum && s->n < MAX_SEGMENTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && ph->p_memsz)
            s->seg[s->n++] = (struct segment){info->dlpi_addr + ph->p_vaddr, ph->p_memsz};
    }
    return s->n >= MAX_SEGMENTS;
}

/* The whole size of the cubin whose ELF header is at addr, from its headers (the section header table, the
 * program headers and every section's contents fit in avail bytes); 0 when it is not a cubin. */
static size_t cubin_size(uintptr_t addr, size_t avail) {
    Elf64_Ehdr eh;
    if (avail < sizeof(eh) || cubin_copy(&eh, (const void *)addr, sizeof(eh)) != 0)
        return 0;
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_CUDA || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !eh.e_shnum || eh.e_shoff > avail || (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)))
        return 0;
    size_t end = eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    size_t ph_end = eh.e_phoff + (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
    if (end > avail || ph_end > avail || eh.e_phoff > avail)
        return 0;
    if (ph_end > end)
        end = ph_end;
    Elf64_Shdr *sh = malloc((size_t)eh.e_shnum * sizeof(Elf64_Shdr));
    if (!sh || cubin_copy(sh, (const void *)(addr + eh.e_shoff), (size_t)eh.e_shnum * sizeof(Elf64_Shdr)) != 0) {
        free(sh);
        return 0;
    }
    for (size_t i = 0; i < eh.e_shnum && end; i++) {
        if (sh[i].sh_type == SHT_NOBITS)
            continue;
        if (sh[i].sh_offset > avail || sh[i].sh_size > avail - sh[i].sh_offset)
            end = 0;  /* a section beyond the memory: not a cubin (or not a whole one) */
        else if (sh[i].sh_offset + sh[i].sh_size > end)
            end = sh[i].sh_offset + sh[i].sh_size;
    }
    free(sh);
    return end;
}

/* The cubins of one segment, read a chunk at a time (chunks overlap by the magic's length less one). */
static int scan_segment(const struct segment *seg, unsigned char *buf, struct cubin_span *out, int n, int max) {
    uintptr_t pos = seg->start, end = seg->start + seg->size;
    while (pos + SELFMAG <= end && n < max) {
        size_t len = end - pos < CHUNK ? end - pos : CHUNK;
        if (cubin_copy(buf, (const void *)pos, len) != 0)
            return n;  /* not readable after all: the rest of the segment is skipped */
        uintptr_t next = pos + len - (SELFMAG - 1);
        const unsigned char *at = buf;
        while (n < max && (at = memmem(at, len - (size_t)(at - buf), ELFMAG, SELFMAG)) != NULL) {
            uintptr_t addr = pos + (uintptr_t)(at - buf);
            size_t size = cubin_size(addr, end - addr);
            if (size) {
                out[n++] = (struct cubin_span){(const void *)addr, size};
                if (addr + size > next) {
                    next = addr + size;
                    break;
                }
                at += size;
            } else {
                at += 1;
            }
            if (at >= buf + len)
                break;
        }
        if (len < CHUNK)
            break;
        pos = next;
    }
    return n;
}

int cubin_scan(struct cubin_span *out, int max) {
    struct segments *s = calloc(1, sizeof(*s));
    unsigned char *buf = malloc(CHUNK);
    int n = 0;
    if (s && buf) {
        dl_iterate_phdr(list_segments, s);
        for (int i = 0; i < s->n && n < max; i++)
            n = scan_segment(&s->seg[i], buf, out, n, max);
    }
    free(buf);
    free(s);
    return n;
}
