package jobspec

import (
	"encoding/json"
	"errors"
	"testing"

	"paddock/internal/tomlfile"
)

// FuzzParse checks that Parse never panics and that its two possible
// results are well formed. The seed corpus is in testdata/fuzz/FuzzParse.
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 60s ./jobspec
func FuzzParse(f *testing.F) {
	f.Add([]byte("command = \"echo hi\"\n"))
	f.Add([]byte("[defaults]\nretries = 1\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = tomlfile.Locate(data, true) // must not panic on any text
		_ = tomlfile.Locate(data, false)
		specs, err := Parse("fuzz.toml", data, "/base")
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Errors) == 0 || specs != nil {
				t.Fatalf("error is not a non-empty *ValidationError: %v", err)
			}
			return
		}
		if len(specs) == 0 {
			t.Fatal("no specs and no error")
		}
		if verr := Validate("fuzz.toml", specs); verr != nil {
			t.Fatalf("Parse accepted specs the store refuses: %v", verr)
		}
		for _, s := range specs {
			if _, err := json.Marshal(s); err != nil {
				t.Fatal(err)
			}
		}
	})
}
