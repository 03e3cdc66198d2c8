"""The little of ELF that scripts/gpu_pack.py needs, with the standard library only (no patchelf on a bare
machine): the dynamic section of a 64-bit little-endian x86-64 object (DT_NEEDED, DT_SONAME, DT_RPATH,
DT_RUNPATH), and replacing a RUNPATH / RPATH in place by a shorter search path.

A search path is rewritten inside its own bytes of .dynstr (the new string, then NULs up to the old length),
so nothing moves. That is safe only when no other name in .dynstr starts inside the old string (linkers merge
string tails: a symbol "lib" could point into "/usr/lib"); set_rpath checks every reference it can find
(needed, soname, dynamic symbols, version needs and definitions) and refuses otherwise."""
import struct

DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
PT_LOAD, PT_DYNAMIC = 1, 2
SHT_DYNSYM, SHT_GNU_VERDEF, SHT_GNU_VERNEED = 11, 0x6FFFFFFD, 0x6FFFFFFE


class ElfError(Exception):
    pass


class Elf:
    """One ELF file read into memory: its dynamic entries and its dynamic string table."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = bytearray(f.read())
        d = self.data
        if d[:4] != b"\x7fELF":
            raise ElfError(f"{path}: not an ELF file")
        if d[4] != 2 or d[5] != 1:
            raise ElfError(f"{path}: not a 64-bit little-endian ELF file (class {d[4]}, data {d[5]})")
        (self.phoff, self.shoff) = struct.unpack_from("<QQ", d, 0x20)
        (self.phentsize, self.phnum, self.shentsize, self.shnum) = struct.unpack_from("<HHHH", d, 0x36)
        self.segments = [struct.unpack_from("<IIQQQQQQ", d, self.phoff + i * self.phentsize) for i in range(self.phnum)]
        dyn = [s for s in self.segments if s[0] == PT_DYNAMIC]
        self.dynamic = []  # (file offset of the entry, tag, value)
        if not dyn:
            self.strtab = None
            return
        off, size = dyn[0][2], dyn[0][5]
        for pos in range(off, off + size, 16):
            tag, val = struct.unpack_from("<qQ", d, pos)
            if tag == DT_NULL:
                break
            self.dynamic.append((pos, tag, val))
        strtab = [v for _, t, v in self.dynamic if t == DT_STRTAB]
        strsz = [v for _, t, v in self.dynamic if t == DT_STRSZ]
        if not strtab or not strsz:
            raise ElfError(f"{path}: dynamic section without DT_STRTAB / DT_STRSZ")
        self.strtab = self.file_offset(strtab[0])
        self.strsz = strsz[0]

    def file_offset(self, vaddr):
        for p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ in self.segments:
            if p_type == PT_LOAD and p_vaddr <= vaddr < p_vaddr + p_filesz:
                return vaddr - p_vaddr + p_offset
        raise ElfError(f"{self.path}: address {vaddr:#x} is in no loaded segment")

    def string(self, index):
        start = self.strtab + index
        end = self.data.index(b"\0", start)
        return self.data[start:end].decode("utf-8", "replace")

    def values(self, tag):
        return [self.string(v) for _, t, v in self.dynamic if t == tag]

    @property
    def needed(self):
        return self.values(DT_NEEDED)

    @property
    def soname(self):
        names = self.values(DT_SONAME)
        return names[0] if names else None

    @property
    def search_path(self):
        """(tag name, value) of the RPATH or RUNPATH entry, or None."""
        for _, t, v in self.dynamic:
            if t in (DT_RPATH, DT_RUNPATH):
                return ("RPATH" if t == DT_RPATH else "RUNPATH", self.string(v))
        return None

    def _sections(self):
        for i in range(self.shnum):
            yield struct.unpack_from("<IIQQQQIIQQ", self.data, self.shoff + i * self.shentsize)

    def _string_references(self):
        """Every .dynstr index this object refers to that we know how to find."""
        d = self.data
        refs = [v for _, t, v in self.dynamic if t in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
        for _, sh_type, _, _, sh_offset, sh_size, _, sh_info, _, sh_entsize in self._sections():
            if sh_type == SHT_DYNSYM:
                step = sh_entsize or 24
                refs += [struct.unpack_from("<I", d, sh_offset + i)[0] for i in range(0, sh_size, step)]
            elif sh_type == SHT_GNU_VERNEED:
                pos = sh_offset
                for _ in range(sh_info):
                    _, cnt, file_, aux, nxt = struct.unpack_from("<HHIII", d, pos)
                    refs.append(file_)
                    apos = pos + aux
                    for _ in range(cnt):
                        _, _, _, name, anext = struct.unpack_from("<IHHII", d, apos)
                        refs.append(name)
                        apos += anext
                    if not nxt:
                        break
                    pos += nxt
            elif sh_type == SHT_GNU_VERDEF:
                pos = sh_offset
                for _ in range(sh_info):
                    _, _, _, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", d, pos)
                    apos = pos + aux
                    for _ in range(cnt):
                        name, anext = struct.unpack_from("<II", d, apos)
                        refs.append(name)
                        apos += anext
                    if not nxt:
                        break
                    pos += nxt
        return refs

    def set_rpath(self, new_path):
        """Replaces the RUNPATH or RPATH by DT_RPATH = new_path (in memory; write() saves). DT_RPATH, not
        DT_RUNPATH: the dynamic loader searches an executable's DT_RPATH for the dependencies of the libraries
        it loads too (libcurl's own dependencies), where DT_RUNPATH serves only the executable's direct ones."""
        entries = [(pos, t, v) for pos, t, v in self.dynamic if t in (DT_RPATH, DT_RUNPATH)]
        if len(entries) != 1:
            raise ElfError(f"{self.path}: expected one RPATH or RUNPATH entry, found {len(entries)}")
        pos, _, index = entries[0]
        old = self.string(index).encode()
        new = new_path.encode()
        if len(new) > len(old):
            raise ElfError(f"{self.path}: the new search path {new_path!r} is longer than the old one")
        inside = [r for r in self._string_references() if index < r <= index + len(old)]
        if inside:
            raise ElfError(f"{self.path}: other names share the bytes of the search path (string offsets {inside[:5]}); "
                           "it cannot be rewritten in place")
        start = self.strtab + index
        self.data[start:start + len(old)] = new + b"\0" * (len(old) - len(new))
        struct.pack_into("<q", self.data, pos, DT_RPATH)
        self.dynamic = [(p, DT_RPATH if p == pos else t, v) for p, t, v in self.dynamic]

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.data)
