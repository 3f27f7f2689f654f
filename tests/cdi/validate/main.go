// kdev-cdi-validate: the reference CDI library (tags.cncf.io/container-device-interface,
// Debian's golang-tags.cncf-container-device-interface-dev 0.8.0) as a consumer of the
// CDI specs kdev writes, the way container runtimes use it (containerd, CRI-O, podman).
//
//	kdev-cdi-validate -spec-dir DIR [-spec-dir DIR ...] [DEVICE ...]
//
// It loads every spec in the spec directories into the library's Cache (no auto
// refresh), with the library's own JSON schema as the spec validator
// (validate.WithSchema(schema.BuiltinSchema())), then injects the fully qualified CDI
// devices (vendor.com/class=name) given as arguments into a minimal OCI runtime spec.
// It prints one JSON object on stdout:
//
//	{"errors":     {"SPEC FILE": ["MESSAGE", ...]},  // the cache's errors per spec file
//	 "dirErrors":  {"DIR": "MESSAGE"},
//	 "devices":    ["vendor.com/class=name", ...],   // every device the cache resolved
//	 "unresolved": ["DEVICE", ...],                    // InjectDevices' unresolved list
//	 "injectError": "MESSAGE",                         // InjectDevices' error, "" when none
//	 "oci": {...}}                                     // the OCI spec after injection
//
// Exit status: 0 when it ran (whatever the library found: the caller asserts on the
// JSON), 2 on bad arguments or when the output cannot be written.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/cdi/validate"
	"tags.cncf.io/container-device-interface/schema"
)

type dirs []string

func (d *dirs) String() string     { return fmt.Sprint(*d) }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

type result struct {
	Errors      map[string][]string `json:"errors"`
	DirErrors   map[string]string   `json:"dirErrors"`
	Devices     []string            `json:"devices"`
	Unresolved  []string            `json:"unresolved"`
	InjectError string              `json:"injectError"`
	OCI         *oci.Spec           `json:"oci"`
}

func main() {
	var specDirs dirs
	flag.Var(&specDirs, "spec-dir", "a CDI spec directory (repeatable; later ones take priority)")
	flag.Parse()
	if len(specDirs) == 0 {
		fmt.Fprintln(os.Stderr, "kdev-cdi-validate: at least one -spec-dir is required")
		os.Exit(2)
	}

	cdi.SetSpecValidator(validate.WithSchema(schema.BuiltinSchema()))
	cache, err := cdi.NewCache(cdi.WithSpecDirs(specDirs...), cdi.WithAutoRefresh(false))
	res := result{Errors: map[string][]string{}, DirErrors: map[string]string{},
		Devices: []string{}, Unresolved: []string{}}
	if err != nil {
		// NewCache's error joins the per-spec errors that GetErrors lists below
		fmt.Fprintln(os.Stderr, "kdev-cdi-validate: cache:", err)
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			res.Errors[path] = append(res.Errors[path], e.Error())
		}
	}
	for dir, e := range cache.GetSpecDirErrors() {
		res.DirErrors[dir] = e.Error()
	}
	res.Devices = append(res.Devices, cache.ListDevices()...)
	sort.Strings(res.Devices)

	spec := &oci.Spec{
		Version: "1.0.2",
		Process: &oci.Process{Env: []string{"PATH=/usr/bin:/bin"}},
		Linux:   &oci.Linux{},
	}
	if args := flag.Args(); len(args) > 0 {
		unresolved, err := cache.InjectDevices(spec, args...)
		res.Unresolved = append(res.Unresolved, unresolved...)
		if err != nil {
			res.InjectError = err.Error()
		}
	}
	res.OCI = spec

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(&res); err != nil {
		fmt.Fprintln(os.Stderr, "kdev-cdi-validate: writing the result:", err)
		os.Exit(2)
	}
}
