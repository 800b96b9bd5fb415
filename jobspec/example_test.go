package jobspec_test

import (
	"fmt"

	"paddock/jobspec"
)

func ExampleParse() {
	src := `
[defaults]
mode = "workspace_write"
retries = 1

[[job]]
name = "build"
command = ["go", "build", "./..."]

[[job]]
name = "test"
command = "go test ./... | tee test.log"
after = ["build"]
cwd = "src"
`
	specs, err := jobspec.Parse("jobs.toml", []byte(src), "/home/me/project")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range specs {
		fmt.Printf("%s: %q mode=%s retries=%d after=%v cwd=%q\n", s.Name, s.Command, s.Mode, s.Retries, s.After, s.Cwd)
	}
	// Output:
	// build: ["go" "build" "./..."] mode=workspace_write retries=1 after=[] cwd=""
	// test: ["/bin/sh" "-c" "go test ./... | tee test.log"] mode=workspace_write retries=1 after=[build] cwd="/home/me/project/src"
}

func ExampleParse_errors() {
	src := `[[job]]
name = "build"
command = "make"
timout = "5m"

[[job]]
name = "test"
command = ["make", "test"]
mode = "read_olny"
workspace = "/"
`
	_, err := jobspec.Parse("jobs.toml", []byte(src), "/srv")
	fmt.Println(err)
	// Output:
	// jobspec: invalid jobs (3 errors):
	//   jobs.toml:4: job "build": timout: unknown key (did you mean "timeout"?)
	//   jobs.toml:9: job "test": mode: unknown mode "read_olny": expected one of read_only, workspace_write, danger_full_access (did you mean "read_only"?)
	//   jobs.toml:10: job "test": workspace: workspace "/" would make the whole filesystem writable: expected a dedicated directory
}
