package kubernetes_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/p2p"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// No cluster is reachable from the test machine, so the manifests are
// checked as far as a client can: every document decodes strictly into
// its Kubernetes API type (an unknown or misspelt field, a wrong type, a
// malformed quantity fails), names are valid, the DaemonSet's selector
// selects its pods, every mount has its volume, the runtime class is
// the one declared, the GPUs are claimed through the device plugin, the
// daemon's arguments are ones idlegrid accepts, and the user, binary and
// repository agree with the image the Dockerfile builds.
func TestTheManifestsAreValid(t *testing.T) {
	docs := documents(t)
	var (
		ds      *appsv1.DaemonSet
		classes []string
		kinds   []string
	)
	for _, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc.body, &meta); err != nil {
			t.Fatalf("%s: %v", doc.name, err)
		}
		kinds = append(kinds, meta.Kind)
		var obj metav1.Object
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 Namespace":
			obj = strict[corev1.Namespace](t, doc)
		case "apps/v1 DaemonSet":
			ds = strict[appsv1.DaemonSet](t, doc)
			obj = ds
		case "node.k8s.io/v1 RuntimeClass":
			rc := strict[nodev1.RuntimeClass](t, doc)
			classes = append(classes, rc.Name)
			if errs := validation.IsDNS1123Label(rc.Handler); len(errs) > 0 {
				t.Errorf("%s: handler %q: %v", doc.name, rc.Handler, errs)
			}
			obj = rc
		default:
			t.Fatalf("%s: unexpected %s %s", doc.name, meta.APIVersion, meta.Kind)
		}
		if errs := validation.IsDNS1123Subdomain(obj.GetName()); len(errs) > 0 {
			t.Errorf("%s: name %q: %v", doc.name, obj.GetName(), errs)
		}
	}
	if ds == nil {
		t.Fatalf("no DaemonSet among %v", kinds)
	}
	pod := ds.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("the DaemonSet's selector %v does not select its pods %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if pod.RuntimeClassName == nil || !slices.Contains(classes, *pod.RuntimeClassName) {
		t.Errorf("runtimeClassName %v is not a RuntimeClass declared here (%v)", pod.RuntimeClassName, classes)
	}
	if !pod.HostNetwork {
		t.Error("the daemon must listen on the node's own addresses (hostNetwork)")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("container %s mounts %q, which is no volume of the pod", c.Name, m.Name)
			}
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the daemon's alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	if gpus, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok || gpus.Value() < 1 {
		t.Errorf("the daemon claims %v GPUs through the device plugin, want at least 1", c.Resources.Limits)
	}
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil {
		t.Fatalf("the pod does not run as a non-root user: %+v", sc)
	}
	if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Error("the daemon's container allows privilege escalation")
	}

	// The daemon's arguments.
	if len(c.Args) == 0 || c.Args[0] != "daemon" {
		t.Fatalf("args %v, want the daemon command", c.Args)
	}
	flags := map[string][]string{}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("argument %q: write flags as --name=value", a)
		}
		flags[k] = append(flags[k], v)
	}
	for k, vs := range flags {
		switch k {
		case "repo", "log-format":
		case "init":
			if !slices.Contains(config.Profiles, vs[0]) {
				t.Errorf("--init=%s: want one of %v", vs[0], config.Profiles)
			}
		case "bootstrap":
			for _, b := range vs {
				if _, err := p2p.ParseAddrInfo(b); err != nil {
					t.Errorf("--bootstrap: %v", err)
				}
			}
		default:
			t.Errorf("--%s is no flag of idlegrid daemon this test knows", k)
		}
	}
	repo := flags["repo"][0]
	if !mounted(c, repo) {
		t.Errorf("the repository %s is on no volume", repo)
	}

	// What the image holds (examples/docker/Dockerfile).
	dockerfile, err := os.ReadFile("../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	user := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindStringSubmatch(string(dockerfile))
	if user == nil || user[1] != itoa(*sc.RunAsUser) {
		t.Errorf("the pod runs as %d, the image's user is %v", *sc.RunAsUser, user)
	}
	if !bytes.Contains(dockerfile, []byte(`VOLUME ["`+repo+`"]`)) {
		t.Errorf("the repository %s is not the image's volume", repo)
	}
	probe := c.LivenessProbe
	if probe == nil || probe.Exec == nil || len(probe.Exec.Command) < 2 || probe.Exec.Command[1] != "status" {
		t.Fatalf("the liveness probe %+v should run idlegrid status", probe)
	}
	if bin := probe.Exec.Command[0]; !bytes.Contains(dockerfile, []byte("COPY --from=build /out"+bin+" "+bin)) {
		t.Errorf("the probe runs %s, which the image does not hold", bin)
	}
}

type document struct {
	name string
	body []byte
}

// documents reads every YAML document of the manifests here.
func documents(t *testing.T) []document {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests here (%v)", err)
	}
	var out []document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			if strings.TrimSpace(stripComments(part)) != "" {
				out = append(out, document{name: f + "#" + itoa(int64(i+1)), body: []byte(part)})
			}
		}
	}
	return out
}

func stripComments(s string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(s, "")
}

// strict decodes doc into a T, refusing any field T does not have.
func strict[T any](t *testing.T, doc document) *T {
	t.Helper()
	v := new(T)
	if err := yaml.UnmarshalStrict(doc.body, v); err != nil {
		t.Fatalf("%s: %v", doc.name, err)
	}
	return v
}

func mounted(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

func itoa[I int | int64](i I) string { return strconv.FormatInt(int64(i), 10) }
