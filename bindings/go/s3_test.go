package ckpt

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// s3Root loads the settings of the S3 server that the ctest fixture s3_server starts (CKPT_S3_TEST_ENV names its
// file of NAME=VALUE lines: endpoint, keys, region, bucket) into the environment, which the ranks inherit, and
// returns a fresh prefix of its bucket. Without the variable (go test run by hand) the test is skipped; ctest's
// go_binding_s3 always sets it.
func s3Root(t *testing.T) string {
	t.Helper()
	settings := os.Getenv("CKPT_S3_TEST_ENV")
	if settings == "" {
		t.Skip("CKPT_S3_TEST_ENV names no S3 server (ctest's go_binding_s3 starts one)")
	}
	file, err := os.Open(settings)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	values := map[string]string{}
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		if name, value, found := strings.Cut(lines.Text(), "="); found {
			values[name] = value
			t.Setenv(name, value)
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("s3://%s/go-%d-%d", values["CKPT_S3_TEST_BUCKET"], os.Getpid(), time.Now().UnixNano())
}

func TestS3SaveOnTwoRanksIsVerifiedAndLoadedOnThreeRanksByColumns(t *testing.T) {
	checkpoint := s3Root(t) + "/two-ranks"
	if err := runRanks("save", 2, checkpoint); err != nil {
		t.Fatal(err)
	}
	reader, err := Open(checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := reader.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if err := runRanks("load-columns", 3, checkpoint); err != nil {
		t.Fatal(err)
	}
}
