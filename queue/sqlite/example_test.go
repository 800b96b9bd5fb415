package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
)

func ExampleStore() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "paddock-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "queue.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	src := "name = \"hello\"\ncommand = \"echo hello\"\n"
	specs, _ := jobspec.Parse("hello.toml", []byte(src), dir)
	if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: src}); err != nil {
		fmt.Println(err)
		return
	}
	jobs, _ := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "worker-1", Limit: 10})
	for _, j := range jobs {
		code := 0
		done, _ := st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: "worker-1",
			Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded, ExitCode: &code, Reason: "exit status 0"}})
		fmt.Println(done.Name, done.State, len(done.Attempts))
	}
	// Output:
	// hello succeeded 1
}
