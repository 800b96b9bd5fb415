// The launcher's machine code for Linux x86-64: the body of the small
// static executable that [Image] builds (see image.go for the file's
// layout and image_amd64.go for how the bytes are taken from here). It
// does, with raw system calls, what [Main] does, on the same arguments
// ([Spec.Args]):
//
//	argv[0] argv[1]=Command handled scoped dirs files flags report
//	        ("d"|"f")PATH ... -- ARGV...
//
// The six numbers are lowercase hexadecimal. It never returns: it
// executes the job's argv or exits 126 (127: not found) after writing one
// report record {"paddock-launch-error":"..."} on the report descriptor
// and "paddock-launch: ..." on stderr.
//
// The code is position independent (relative branches only); its
// constant strings are at fixed addresses in the image (STR + 64*index,
// the table in image.go). It runs on the initial process stack, below
// which it keeps one scratch area (R9).

#include "textflag.h"

// The image's string table (image.go: imageBase + stringsOff).
#define STR 0x400100
#define S_PREFIX (STR+0*64)
#define S_SUFFIX (STR+1*64)
#define S_STDERR (STR+2*64)
#define S_SH (STR+3*64)
#define S_ERRNO (STR+4*64)
#define S_DEFPATH (STR+5*64)
#define S_BADARGS (STR+6*64)
#define S_SECCOMP (STR+7*64)
#define S_RULESET (STR+8*64)
#define S_OPEN (STR+9*64)
#define S_ADDRULE (STR+10*64)
#define S_NNP (STR+11*64)
#define S_RESTRICT (STR+12*64)
#define S_SIGNAL (STR+13*64)
#define S_CLOEXEC (STR+14*64)
#define S_EXECVP (STR+15*64)
#define S_SPACE (STR+16*64)
#define S_NL (STR+17*64)

// Scratch area offsets from R9.
#define PATHBUF 0
#define PATHMAX 4096
#define MSGBUF 4096
#define MSGEND 6000
#define F_HANDLED 6144
#define F_SCOPED 6152
#define F_DIRS 6160
#define F_FILES 6168
#define F_FLAGS 6176
#define F_REPORT 6184
#define ATTR 6192
#define RLIM 6224
#define SAVE 6240
#define SCRATCH 8192

// System call numbers, x86-64 (arch/x86/entry/syscalls/syscall_64.tbl).
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_getpid 39
#define SYS_execve 59
#define SYS_kill 62
#define SYS_fcntl 72
#define SYS_prctl 157
#define SYS_exit_group 231
#define SYS_prlimit64 302
#define SYS_close_range 436
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446

// fail: DX = message address, R8 = a C string to add after it (0: none),
// R10 = errno (0: none), R15 = exit status.
#define FAIL(msg, extra, errno, code) MOVQ $msg, DX; MOVQ extra, R8; MOVQ errno, R10; MOVQ $code, R15; JMP fail

// imageText is never called from Go: image_amd64.go copies its bytes.
TEXT ·imageText(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ SP, AX              // AX: argc, then argv[], NULL, envp[], NULL
	MOVQ 0(AX), R13          // R13: argc
	LEAQ 8(AX), R12          // R12: argv
	LEAQ 16(AX)(R13*8), R14  // R14: envp
	SUBQ $SCRATCH, SP
	ANDQ $~15, SP
	MOVQ SP, R9              // R9: scratch area
	MOVQ $2, F_REPORT(R9)    // stderr until the argument is read

	// The six numbers: argv[2] .. argv[7] into F_HANDLED .. F_REPORT.
	CMPQ R13, $9
	JLT badargs
	MOVQ $2, R15
hexarg:
	MOVQ (R12)(R15*8), SI
	XORQ AX, AX
	XORQ CX, CX
hexchar:
	MOVBQZX (SI), DX
	TESTQ DX, DX
	JEQ hexdone
	CMPQ DX, $'0'
	JLT badargs
	CMPQ DX, $'9'
	JLE hexdigit
	CMPQ DX, $'a'
	JLT badargs
	CMPQ DX, $'f'
	JGT badargs
	SUBQ $('a'-10), DX
	JMP hexadd
hexdigit:
	SUBQ $'0', DX
hexadd:
	SHLQ $4, AX
	ORQ DX, AX
	INCQ SI
	INCQ CX
	CMPQ CX, $16
	JGT badargs
	JMP hexchar
hexdone:
	TESTQ CX, CX
	JEQ badargs
	MOVQ AX, (F_HANDLED-16)(R9)(R15*8)
	INCQ R15
	CMPQ R15, $8
	JLT hexarg

	// The report descriptor must not reach the job.
	MOVQ $SYS_fcntl, AX
	MOVQ F_REPORT(R9), DI
	MOVQ $2, SI              // F_SETFD
	MOVQ $1, DX              // FD_CLOEXEC
	SYSCALL

	// Seccomp: flags bit 0 asks that a filter be in force.
	TESTQ $1, F_FLAGS(R9)
	JEQ landlock
	MOVQ $SYS_prctl, AX
	MOVQ $21, DI             // PR_GET_SECCOMP
	XORQ SI, SI
	XORQ DX, DX
	XORQ R10, R10
	XORQ R8, R8
	SYSCALL
	CMPQ AX, $2              // SECCOMP_MODE_FILTER
	JEQ landlock
	FAIL(S_SECCOMP, $0, $0, 126)

landlock:
	// The ruleset: handled_access_fs, handled_access_net (0), scoped.
	MOVQ $-1, SAVE(R9)
	CMPQ F_HANDLED(R9), $0
	JEQ rules
	MOVQ F_HANDLED(R9), AX
	MOVQ AX, ATTR(R9)
	MOVQ $0, (ATTR+8)(R9)
	MOVQ F_SCOPED(R9), AX
	MOVQ AX, (ATTR+16)(R9)
	MOVQ $SYS_landlock_create_ruleset, AX
	LEAQ ATTR(R9), DI
	MOVQ $24, SI
	XORQ DX, DX
	SYSCALL
	TESTQ AX, AX
	JGE rulesetok
	NEGQ AX
	FAIL(S_RULESET, $0, AX, 126)
rulesetok:
	MOVQ AX, SAVE(R9)

rules:
	// argv[8] on: "d"PATH or "f"PATH, up to "--".
	MOVQ $8, R15
ruleloop:
	CMPQ R15, R13
	JGE badargs
	MOVQ (R12)(R15*8), SI
	MOVBQZX (SI), DX
	CMPQ DX, $'-'
	JNE rulekind
	CMPB 1(SI), $'-'
	JNE badargs
	CMPB 2(SI), $0
	JNE badargs
	JMP rulesdone
rulekind:
	MOVQ F_DIRS(R9), AX
	CMPQ DX, $'d'
	JEQ ruleopen
	MOVQ F_FILES(R9), AX
	CMPQ DX, $'f'
	JNE badargs
ruleopen:
	CMPQ SAVE(R9), $0
	JLT badargs              // a rule without a ruleset
	MOVQ AX, ATTR(R9)        // allowed_access (u64), then parent_fd (s32): packed
	INCQ SI
	MOVQ SI, BX              // BX: the path, for the messages
	MOVQ $SYS_open, AX
	MOVQ SI, DI
	MOVQ $0x280000, SI       // O_PATH|O_CLOEXEC
	XORQ DX, DX
	SYSCALL
	TESTQ AX, AX
	JGE ruleadd
	NEGQ AX
	FAIL(S_OPEN, BX, AX, 126)
ruleadd:
	MOVL AX, (ATTR+8)(R9)
	MOVQ AX, (SAVE+8)(R9)
	MOVQ $SYS_landlock_add_rule, AX
	MOVQ SAVE(R9), DI
	MOVQ $1, SI              // LANDLOCK_RULE_PATH_BENEATH
	LEAQ ATTR(R9), DX
	XORQ R10, R10
	SYSCALL
	TESTQ AX, AX
	JGE ruleclose
	NEGQ AX
	FAIL(S_ADDRULE, BX, AX, 126)
ruleclose:
	MOVQ $SYS_close, AX
	MOVQ (SAVE+8)(R9), DI
	SYSCALL
	INCQ R15
	JMP ruleloop

rulesdone:
	// R15 is the index of "--"; the job's argv follows it.
	INCQ R15
	CMPQ R15, R13
	JGE badargs
	MOVQ R15, (SAVE+16)(R9)
	CMPQ SAVE(R9), $0
	JLT closefds
	MOVQ $SYS_prctl, AX
	MOVQ $38, DI             // PR_SET_NO_NEW_PRIVS
	MOVQ $1, SI
	XORQ DX, DX
	XORQ R10, R10
	XORQ R8, R8
	SYSCALL
	TESTQ AX, AX
	JEQ restrict
	NEGQ AX
	FAIL(S_NNP, $0, AX, 126)
restrict:
	MOVQ $SYS_landlock_restrict_self, AX
	MOVQ SAVE(R9), DI
	XORQ SI, SI
	SYSCALL
	TESTQ AX, AX
	JEQ restricted
	NEGQ AX
	FAIL(S_RESTRICT, $0, AX, 126)
restricted:
	MOVQ $SYS_close, AX
	MOVQ SAVE(R9), DI
	SYSCALL
	// With the signal scope (LANDLOCK_SCOPE_SIGNAL, 2), the pid
	// namespace's init, outside the new domain, can no longer be
	// signalled: proof that the domain is in force.
	TESTQ $2, F_SCOPED(R9)
	JEQ closefds
	MOVQ $SYS_getpid, AX
	SYSCALL
	CMPQ AX, $1
	JEQ closefds
	MOVQ $SYS_kill, AX
	MOVQ $1, DI
	XORQ SI, SI
	SYSCALL
	CMPQ AX, $-1             // -EPERM
	JEQ closefds
	NEGQ AX
	FAIL(S_SIGNAL, $0, AX, 126)

closefds:
	// Every descriptor from 3 up close-on-exec.
	MOVQ $SYS_close_range, AX
	MOVQ $3, DI
	MOVL $0xffffffff, SI
	MOVQ $4, DX              // CLOSE_RANGE_CLOEXEC
	SYSCALL
	TESTQ AX, AX
	JEQ execvp
	CMPQ AX, $-38            // -ENOSYS: Linux < 5.11
	JEQ closeloop
	CMPQ AX, $-22            // -EINVAL: Linux < 5.11 (no CLOSE_RANGE_CLOEXEC)
	JEQ closeloop
	NEGQ AX
	FAIL(S_CLOEXEC, $0, AX, 126)
closeloop:
	MOVQ $SYS_prlimit64, AX
	XORQ DI, DI
	MOVQ $7, SI              // RLIMIT_NOFILE
	XORQ DX, DX
	LEAQ RLIM(R9), R10
	SYSCALL
	TESTQ AX, AX
	JEQ closeloop1
	NEGQ AX
	FAIL(S_CLOEXEC, $0, AX, 126)
closeloop1:
	// RLIM_INFINITY and the like: no kernel has more than 1<<20
	// descriptors (fs.nr_open's ceiling).
	CMPQ RLIM(R9), $0x100000
	JLS closeloop0
	MOVQ $0x100000, RLIM(R9)
closeloop0:
	MOVQ $3, BX
closeloop2:
	CMPQ BX, RLIM(R9)
	JCC execvp
	MOVQ $SYS_fcntl, AX
	MOVQ BX, DI
	MOVQ $2, SI              // F_SETFD
	MOVQ $1, DX              // FD_CLOEXEC
	SYSCALL
	INCQ BX
	JMP closeloop2

execvp:
	// As execvp(3): a name with a slash is executed as it is; otherwise
	// each element of $PATH ("/bin:/usr/bin" when unset; an empty one is
	// "."), EACCES remembered while the search goes on, ENOEXEC run by
	// /bin/sh. BX: the name; R15: its index in argv; R8: saw EACCES.
	MOVQ (SAVE+16)(R9), R15
	MOVQ (R12)(R15*8), BX
	XORQ R8, R8
	CMPB (BX), $0
	JEQ notfound
	MOVQ BX, SI
slashscan:
	MOVBQZX (SI), DX
	TESTQ DX, DX
	JEQ pathlookup
	CMPQ DX, $'/'
	JEQ direct
	INCQ SI
	JMP slashscan
direct:
	MOVQ BX, DI
	MOVQ $1, (SAVE+24)(R9)   // no more candidates after this one
	JMP try

pathlookup:
	// R11: the name's length; SI: $PATH's value.
	MOVQ SI, R11
	SUBQ BX, R11
	MOVQ $S_DEFPATH, SI
	MOVQ R14, CX
envscan:
	MOVQ (CX), DX
	TESTQ DX, DX
	JEQ pathloop
	CMPB 0(DX), $'P'
	JNE envnext
	CMPB 1(DX), $'A'
	JNE envnext
	CMPB 2(DX), $'T'
	JNE envnext
	CMPB 3(DX), $'H'
	JNE envnext
	CMPB 4(DX), $'='
	JNE envnext
	LEAQ 5(DX), SI
	JMP pathloop
envnext:
	ADDQ $8, CX
	JMP envscan

pathloop:
	// SI: the start of the next element. Copy it, "/" and the name into
	// PATHBUF; an element that would not fit is skipped (ENAMETOOLONG).
	MOVQ R9, DI
	MOVQ $0, (SAVE+24)(R9)
elemcopy:
	MOVBQZX (SI), DX
	TESTQ DX, DX
	JEQ elemend
	CMPQ DX, $':'
	JEQ elemend
	LEAQ (PATHMAX-2)(R9), AX
	SUBQ R11, AX
	CMPQ DI, AX
	JCC elemskip
	MOVB DX, (DI)
	INCQ DI
	INCQ SI
	JMP elemcopy
elemskip:
	MOVBQZX (SI), DX
	TESTQ DX, DX
	JEQ elemskiplast
	CMPQ DX, $':'
	JEQ elemskipnext
	INCQ SI
	JMP elemskip
elemskipnext:
	INCQ SI
	JMP pathloop
elemskiplast:
	JMP nomore
elemend:
	CMPB (SI), $0
	JNE elemnotlast
	MOVQ $1, (SAVE+24)(R9)
	JMP elemjoin
elemnotlast:
	INCQ SI                  // past ':'
elemjoin:
	MOVQ SI, (SAVE+32)(R9)
	// "./", the name and its NUL must fit too.
	LEAQ (PATHMAX-3)(R9), AX
	SUBQ R11, AX
	CMPQ DI, AX
	JCC trynext
	CMPQ DI, R9
	JNE elemslash
	MOVB $'.', (DI)
	INCQ DI
elemslash:
	MOVB $'/', (DI)
	INCQ DI
	MOVQ BX, SI
namecopy:
	MOVB (SI), DX
	MOVB DX, (DI)
	INCQ SI
	INCQ DI
	TESTB DX, DX
	JNE namecopy
	MOVQ R9, DI

try:
	// DI: the file to execute.
	MOVQ DI, (SAVE+40)(R9)
	MOVQ $SYS_execve, AX
	LEAQ (R12)(R15*8), SI
	MOVQ R14, DX
	SYSCALL
	CMPQ AX, $-8             // -ENOEXEC: run it with /bin/sh
	JEQ script
	CMPQ AX, $-13            // -EACCES
	JNE tryerr
	MOVQ $1, R8
	JMP trynext
tryerr:
	CMPQ AX, $-2             // -ENOENT
	JEQ trynext
	CMPQ AX, $-20            // -ENOTDIR
	JEQ trynext
	CMPQ AX, $-116           // -ESTALE
	JEQ trynext
	CMPQ AX, $-19            // -ENODEV
	JEQ trynext
	CMPQ AX, $-110           // -ETIMEDOUT
	JEQ trynext
	NEGQ AX
	FAIL(S_EXECVP, BX, AX, 126)
trynext:
	CMPQ (SAVE+24)(R9), $0
	JNE nomore
	MOVQ (SAVE+32)(R9), SI
	JMP pathloop
nomore:
	TESTQ R8, R8
	JEQ notfound
	FAIL(S_EXECVP, BX, $13, 126)
notfound:
	FAIL(S_EXECVP, BX, $2, 127)

script:
	// argv[i-1] (the "--") becomes "/bin/sh" and argv[i] the file:
	// /bin/sh FILE ARGS...
	MOVQ $S_SH, AX
	MOVQ AX, -8(R12)(R15*8)
	MOVQ (SAVE+40)(R9), AX
	MOVQ AX, (R12)(R15*8)
	MOVQ $SYS_execve, AX
	MOVQ $S_SH, DI
	LEAQ -8(R12)(R15*8), SI
	MOVQ R14, DX
	SYSCALL
	MOVQ BX, (R12)(R15*8)
	FAIL(S_EXECVP, BX, $8, 126)

badargs:
	FAIL(S_BADARGS, $0, $0, 126)

fail:
	// The message at MSGBUF: prefix, message, " " extra, ": errno N",
	// suffix. Extra bytes that JSON would need escaped become '?'. The
	// copy loop returns to the step BX names (no stack calls here).
	LEAQ MSGBUF(R9), DI
	MOVQ $S_PREFIX, SI
	MOVQ $1, BX
	JMP copy
step1:
	MOVQ DI, (SAVE+48)(R9)   // where the text starts
	MOVQ DX, SI
	MOVQ $2, BX
	JMP copy
step2:
	TESTQ R8, R8
	JEQ step4
	MOVQ $S_SPACE, SI
	MOVQ $3, BX
	JMP copy
step3:
	MOVQ R8, SI
	MOVQ $4, BX
	JMP copyesc
step4:
	TESTQ R10, R10
	JEQ step6
	MOVQ $S_ERRNO, SI
	MOVQ $5, BX
	JMP copy
step5:
	// R10 in decimal (at most 20 digits), written backwards below SAVE+96.
	LEAQ (SAVE+96)(R9), CX
	MOVQ R10, AX
itoa:
	XORQ DX, DX
	MOVQ $10, SI
	DIVQ SI
	ADDQ $'0', DX
	DECQ CX
	MOVB DX, (CX)
	TESTQ AX, AX
	JNE itoa
	MOVB $0, (SAVE+96)(R9)
	MOVQ CX, SI
	MOVQ $6, BX
	JMP copy
step6:
	MOVQ DI, (SAVE+56)(R9)   // where the text ends
	MOVQ $S_SUFFIX, SI
	MOVQ $7, BX
	JMP copy
step7:
	// The record on the report descriptor.
	MOVQ DI, DX
	LEAQ MSGBUF(R9), SI
	SUBQ SI, DX
	MOVQ $SYS_write, AX
	MOVQ F_REPORT(R9), DI
	SYSCALL
	// "paddock-launch: TEXT\n" on stderr.
	MOVQ $SYS_write, AX
	MOVQ $2, DI
	MOVQ $S_STDERR, SI
	MOVQ $16, DX
	SYSCALL
	MOVQ $SYS_write, AX
	MOVQ $2, DI
	MOVQ (SAVE+48)(R9), SI
	MOVQ (SAVE+56)(R9), DX
	SUBQ SI, DX
	SYSCALL
	MOVQ $SYS_write, AX
	MOVQ $2, DI
	MOVQ $S_NL, SI
	MOVQ $1, DX
	SYSCALL
	MOVQ $SYS_exit_group, AX
	MOVQ R15, DI
	SYSCALL
	HLT

copy:
	// Appends the C string at SI to DI, up to MSGEND, then goes to step BX.
	XORQ CX, CX
	LEAQ MSGEND(R9), R13
	JMP copyloop
copyesc:
	// As copy, up to 64 bytes less (room for the errno and the suffix),
	// replacing '"', '\\' and bytes below 0x20 with '?'.
	MOVQ $1, CX
	LEAQ (MSGEND-64)(R9), R13
copyloop:
	CMPQ DI, R13
	JCC copydone
	MOVBQZX (SI), R11
	TESTQ R11, R11
	JEQ copydone
	TESTQ CX, CX
	JEQ copystore
	CMPQ R11, $0x20
	JLT copyq
	CMPQ R11, $'"'
	JEQ copyq
	CMPQ R11, $'\\'
	JNE copystore
copyq:
	MOVQ $'?', R11
copystore:
	MOVB R11, (DI)
	INCQ DI
	INCQ SI
	JMP copyloop
copydone:
	CMPQ BX, $1
	JEQ step1
	CMPQ BX, $2
	JEQ step2
	CMPQ BX, $3
	JEQ step3
	CMPQ BX, $4
	JEQ step4
	CMPQ BX, $5
	JEQ step5
	CMPQ BX, $6
	JEQ step6
	JMP step7
	// The end of the code: image_amd64.go copies up to this marker.
	BYTE $0x50; BYTE $0x41; BYTE $0x44; BYTE $0x44; BYTE $0x4f; BYTE $0x43; BYTE $0x4b; BYTE $0x2d
	BYTE $0x4c; BYTE $0x41; BYTE $0x55; BYTE $0x4e; BYTE $0x43; BYTE $0x48; BYTE $0x2d; BYTE $0x45

// imageTextStart returns the address of imageText's first instruction.
TEXT ·imageTextStart(SB), NOSPLIT, $0-8
	LEAQ ·imageText(SB), AX
	MOVQ AX, ret+0(FP)
	RET
