package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// No image is built here (no container engine runs on this machine): the
// test checks that the Containerfile builds the package that exists, with
// the flags that make the binary static and reproducible, and that the
// image agrees with the Kubernetes Deployment.
func TestContainerfile(t *testing.T) {
	text := readFile(t, "Containerfile")
	var froms, exposed []string
	var entrypoint []string
	var user string
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			froms = append(froms, rest)
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(rest)...)
		case "USER":
			user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the JSON form: %v", rest, err)
			}
		}
	}
	if len(froms) != 2 {
		t.Fatalf("want a build stage and a runtime stage, have FROM %q", froms)
	}
	if !strings.Contains(froms[0], "golang:1.26") || !strings.HasSuffix(froms[0], " AS build") {
		t.Errorf("build stage FROM %s: want golang:1.26… AS build", froms[0])
	}
	if !strings.Contains(froms[1], "distroless/static") {
		t.Errorf("runtime stage FROM %s: want distroless/static (CA certificates, no shell)", froms[1])
	}

	build := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build (.*) -o /out/cproxy (\./cmd/\S+)$`).FindStringSubmatch(text)
	if build == nil {
		t.Fatal("no RUN CGO_ENABLED=0 go build … -o /out/cproxy ./cmd/… line")
	}
	for _, flag := range []string{"-trimpath", "-s -w -buildid="} {
		if !strings.Contains(build[1], flag) {
			t.Errorf("go build flags %s: want %s", build[1], flag)
		}
	}
	if fi, err := os.Stat("../" + build[2] + "/main.go"); err != nil || fi.IsDir() {
		t.Errorf("the Containerfile builds %s, which has no main.go", build[2])
	}
	if !strings.Contains(text, "COPY --from=build /out/cproxy /cproxy") {
		t.Error("the runtime stage does not copy /out/cproxy to /cproxy")
	}

	// Both Deployments run the image: the one-replica set's and replicas/.
	for _, files := range [][]string{singleReplicaFiles(t), replicaFiles(t)} {
		d := only(t, "Deployment", loadManifests(t, files).deployments)
		pod := d.Spec.Template.Spec
		c := only(t, "container", pod.Containers)
		if !slices.Equal(entrypoint, c.Command) {
			t.Errorf("ENTRYPOINT %q and the Deployment's command %q differ", entrypoint, c.Command)
		}
		var ports []string
		for _, p := range c.Ports {
			ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
		}
		if !slices.Equal(exposed, ports) {
			t.Errorf("EXPOSE %v, the Deployment's ports %v", exposed, ports)
		}
		uid, _, _ := strings.Cut(user, ":")
		if n, err := strconv.ParseInt(uid, 10, 64); err != nil || n == 0 || n != *pod.SecurityContext.RunAsUser {
			t.Errorf("USER %q: want the non-root UID the Deployment runs as (%d)", user, *pod.SecurityContext.RunAsUser)
		}
	}
}
