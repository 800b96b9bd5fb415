package hooks_test

import (
	"errors"
	"fmt"

	"paddock/hooks"
)

func ExampleParseDecision() {
	d, err := hooks.ParseDecision([]byte(`{"decision":"adjust","reason":"no writes needed","job":{"mode":"read_only"}}`))
	fmt.Println(d.Decision, *d.Job.Mode, err)

	_, err = hooks.ParseDecision([]byte(`{"decision":"allow","colour":"blue"}`))
	fmt.Println(errors.Is(err, hooks.ErrBadDecision), err)
	// Output:
	// adjust read_only <nil>
	// true hooks: invalid decision: unknown field "colour"
}

func ExampleApplyAdjustment() {
	job := hooks.Job{Argv: []string{"git", "push"}, Mode: "read_only"}
	wider := "workspace_write"
	_, _, err := hooks.ApplyAdjustment(job, &hooks.Adjustment{Mode: &wider}, false)
	fmt.Println(errors.Is(err, hooks.ErrWiden), err)

	adjusted, changed, err := hooks.ApplyAdjustment(job, &hooks.Adjustment{Argv: []string{"git", "push", "--dry-run"}}, false)
	fmt.Println(adjusted.Argv, changed, err)
	// Output:
	// true hooks: adjustment widens the sandbox: mode read_only -> workspace_write
	// [git push --dry-run] [argv] <nil>
}
