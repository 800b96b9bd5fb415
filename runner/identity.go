package runner

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
)

// NewWorkerID returns a name for one process start, recorded with each
// attempt it claims and in its leases: "HOST:PID:BOOT:NONCE", with BOOT
// the first 8 hex digits of the kernel's boot id
// (/proc/sys/kernel/random/boot_id, random(4)) and NONCE 8 random hex
// digits; role, when not "", is appended (":run"). Host and pid alone are
// not unique: two containers share a host name, and a pid comes back after
// a reboot or in another pid namespace. A reused name would let a new
// process heartbeat the orphaned leases of a dead one (so they would never
// be recovered) or finish its attempts. Safe for concurrent use.
func NewWorkerID(role string) string {
	host, boot := hostAndBoot()
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	id := host + ":" + strconv.Itoa(os.Getpid()) + ":" + boot + ":" + hex.EncodeToString(nonce[:])
	if role != "" {
		id += ":" + role
	}
	return id
}

// hostAndBoot returns this host's name and the first 8 hex digits of its
// boot id, as NewWorkerID records them.
func hostAndBoot() (host, boot string) {
	host, _ = os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	boot = "nobootid"
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""); len(id) >= 8 {
			boot = id[:8]
		}
	}
	return host, boot
}

// WorkerOnThisHost reports whether workerID, a NewWorkerID name, was
// made on this host since it last booted: the same host name and boot
// id. A name of another form is not. Safe for concurrent use.
func WorkerOnThisHost(workerID string) bool {
	f := strings.Split(workerID, ":")
	if len(f) < 4 {
		return false
	}
	host, boot := hostAndBoot()
	return f[0] == host && f[2] == boot
}
