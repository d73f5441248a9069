package market

import (
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

func TestValidateDatasetsNamesTheFieldAtFault(t *testing.T) {
	const c = "bafybeiavfgpytvzxpw7siks2wh7rrh4ksdt2krdyuxu22yieuchlvbvr54"
	good := func() *pb.DatasetMount { return &pb.DatasetMount{Cid: c, Bytes: 1 << 20, Path: "/data"} }
	if err := ValidateDatasets([]*pb.DatasetMount{good(), {Cid: c, Bytes: 1, Path: "/models/llama"}}); err != nil {
		t.Fatalf("two good datasets: %v", err)
	}
	many := make([]*pb.DatasetMount, MaxDatasets+1)
	for i := range many {
		many[i] = good()
		many[i].Path = "/d" + strings.Repeat("x", i)
	}
	cases := []struct {
		name string
		dss  []*pb.DatasetMount
		want string
	}{
		{"too many", many, "workload.datasets: 9; at most 8"},
		{"a CIDv0", []*pb.DatasetMount{{Cid: "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG", Bytes: 1, Path: "/data"}}, "workload.datasets[0].cid"},
		{"no CID", []*pb.DatasetMount{{Cid: "nope", Bytes: 1, Path: "/data"}}, "workload.datasets[0].cid"},
		{"no bytes", []*pb.DatasetMount{{Cid: c, Path: "/data"}}, "workload.datasets[0].bytes"},
		{"too many bytes", []*pb.DatasetMount{{Cid: c, Bytes: MaxDatasetBytes + 1, Path: "/data"}}, "workload.datasets[0].bytes"},
		{"relative", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "data"}}, "workload.datasets[0].path"},
		{"unclean", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/data/../etc"}}, "workload.datasets[0].path"},
		{"root", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/"}}, "workload.datasets[0].path"},
		{"in the workspace", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/workspace/data"}}, "is in /workspace"},
		{"over the system", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/usr/lib"}}, "is in /usr"},
		{"over /proc", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/proc"}}, "is in /proc"},
		{"inside another", []*pb.DatasetMount{good(), {Cid: c, Bytes: 1, Path: "/data/more"}}, "overlaps workload.datasets[0].path"},
		{"twice", []*pb.DatasetMount{good(), good()}, "overlaps"},
	}
	for _, tc := range cases {
		err := ValidateDatasets(tc.dss)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
