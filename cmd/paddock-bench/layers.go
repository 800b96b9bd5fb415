package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"paddock/sandbox"
)

// layerVariant is one shape of the confined /bin/true argv of scenario 6.
type layerVariant struct {
	name string
	// seccomp, landlock: the layers the argv carries; ipc: --unshare-ipc.
	seccomp, ipc, landlock bool
	// goLauncher hands bwrap paddock's own binary as the launcher (the
	// fallback where there is no launcher image) instead of the one a
	// worker uses.
	goLauncher bool
}

// layerVariants go from bwrap alone to the whole fence, one layer added
// at a time.
var layerVariants = []layerVariant{
	{name: "bwrap alone"},
	{name: "+ --unshare-ipc", ipc: true},
	{name: "+ seccomp", ipc: true, seccomp: true},
	{name: "+ Landlock launcher (whole fence)", ipc: true, seccomp: true, landlock: true},
	{name: "+ Landlock launcher, paddock's binary", ipc: true, seccomp: true, landlock: true, goLauncher: true},
}

// wholeFence is the index in layerVariants of the fence as a worker
// builds it.
const wholeFence = 3

// layers is scenario 6: the per-job cost of each layer of the fence. It
// runs the confined /bin/true argv jobs times per run in each variant,
// one job of each in turn (so that load changes hit them alike), spawned
// as the worker spawns them (status pipe, a seccomp pipe per job, the
// launcher the worker uses), and reports each variant's median per
// job, and the launcher's own cost: the whole fence less the + seccomp
// variant, job by job.
func (b *bench) layers(ctx context.Context) error {
	d := b.probe.Discovery()
	dir, err := b.dir("layers")
	if err != nil {
		return err
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	pol, err := sandbox.NewPolicy(sandbox.PolicyParams{Mode: sandbox.ModeWorkspaceWrite, Workspace: ws, Network: true})
	if err != nil {
		return err
	}
	launcher, err := sandbox.OpenLauncher(d.Grade)
	if err != nil {
		return err
	}
	defer launcher.Close()
	goLauncher, err := os.Open(b.o.paddock)
	if err != nil {
		return err
	}
	defer goLauncher.Close()
	argvs := make([][]string, len(layerVariants))
	for i, v := range layerVariants {
		vd := d
		vd.Seccomp = v.seccomp && d.Seccomp
		if !v.landlock {
			vd.LandlockABI = 0
		}
		if v.landlock && d.LandlockABI == 0 {
			b.note("layers", v.name, "no Landlock on this host")
			argvs[i] = nil
			continue
		}
		argv, err := sandbox.ConfineWith([]string{"/bin/true"}, pol, vd)
		if err != nil {
			return err
		}
		if !v.ipc {
			argv = slices.DeleteFunc(argv, func(a string) bool { return a == "--unshare-ipc" })
		}
		argvs[i] = argv
	}
	perJob := make([][]float64, len(layerVariants)) // per run: median ms per job
	launcherCost, goLauncherCost := []float64{}, []float64{}
	for r := range b.o.runs {
		durs := make([][]float64, len(layerVariants))
		var diffs, goDiffs []float64
		for range b.o.jobs {
			var seccompOnly float64
			for i, v := range layerVariants {
				if argvs[i] == nil {
					continue
				}
				l := launcher
				if v.goLauncher {
					l = goLauncher
				}
				ms, err := spawnConfined(ctx, argvs[i], pol, v.seccomp && d.Seccomp, v.landlock, l)
				if err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				durs[i] = append(durs[i], ms)
				if v.seccomp && !v.landlock {
					seccompOnly = ms
				}
				switch {
				case v.landlock && v.goLauncher:
					goDiffs = append(goDiffs, ms-seccompOnly)
				case v.landlock:
					diffs = append(diffs, ms-seccompOnly)
				}
			}
		}
		for i := range layerVariants {
			if len(durs[i]) > 0 {
				perJob[i] = append(perJob[i], medianOf(durs[i]))
			}
		}
		if len(diffs) > 0 {
			launcherCost = append(launcherCost, medianOf(diffs))
			goLauncherCost = append(goLauncherCost, medianOf(goDiffs))
		}
		if whole := perJob[wholeFence]; len(whole) > 0 {
			b.logf("layers run %d/%d: %.2f ms per job bwrap alone, %.2f ms the whole fence", r+1, b.o.runs, perJob[0][r], whole[len(whole)-1])
		}
	}
	base := layerVariants[0].name
	for i, v := range layerVariants {
		if len(perJob[i]) == 0 {
			continue
		}
		note := ""
		if i == 0 {
			note = fmt.Sprintf("confined /bin/true, %d jobs per run, spawned one by one", b.o.jobs)
		}
		bl := base
		if i == 0 {
			bl = ""
		}
		b.add("layers", v.name, "ms", perJob[i], bl, note)
	}
	if len(launcherCost) > 0 {
		b.add("layers", "Landlock launcher, cost per job", "ms", launcherCost, "", "whole fence less + seccomp, median of the per-job differences")
		b.add("layers", "Landlock launcher, paddock's binary, cost per job", "ms", goLauncherCost, "", "the same with paddock's binary as the launcher")
	}
	return nil
}

// spawnConfined runs a confined argv as the worker does, waits for it and
// returns its wall time in milliseconds. It fails unless the command ran
// and exited 0.
func spawnConfined(ctx context.Context, argv []string, pol sandbox.Policy, seccomp, landlock bool, launcher *os.File) (float64, error) {
	start := time.Now()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	in := sandbox.Inherited{Status: pw}
	if seccomp {
		if in.Seccomp, err = sandbox.SeccompFile(pol); err != nil {
			pw.Close()
			return 0, err
		}
	}
	if landlock {
		in.Launcher = launcher
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.ExtraFiles = in.ExtraFiles()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	if in.Seccomp != nil {
		in.Seccomp.Close()
	}
	if err != nil {
		return 0, err
	}
	stCh := make(chan sandbox.Status, 1)
	go func() { st, _ := sandbox.ReadStatus(pr); stCh <- st }()
	werr := cmd.Wait()
	st := <-stCh
	ms := float64(time.Since(start).Microseconds()) / 1000
	if werr != nil || !st.Ran || st.ExitCode != 0 {
		return 0, errors.Join(werr, fmt.Errorf("the job did not run and exit 0 (status %+v)", st))
	}
	return ms, nil
}

// medianOf returns the median of xs (sorted in place).
func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	return median(xs)
}
