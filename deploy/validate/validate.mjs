#!/usr/bin/env node
// Validates Kubernetes manifests without a cluster, the way the API server
// would reject them:
//
//   1. schema: every document against Kubernetes' published OpenAPI schema for
//      its apiVersion and kind (kubernetes-models: types, required fields,
//      enums, formats);
//   2. strict fields: every field must be known to that schema (the
//      OpenAPI-generated models of @kubernetes/client-node); an unknown or
//      misspelt field is an error, as with `kubectl apply --validate=strict`;
//   3. a few checks the API server makes beyond the schema: a workload's
//      selector matches its pod template's labels, every volumeMount names a
//      volume, container names are unique;
//   4. references between the documents given together: the namespace, the
//      ServiceAccount and the ConfigMaps a pod uses, the ServiceAccount and
//      ClusterRole a ClusterRoleBinding names.
//
// Usage: node validate.mjs [FILE.yaml...]   (default: ../kubernetes/*.yaml)
//        node validate.mjs --dump [FILE...] (prints containers and ConfigMaps
//                                            as JSON, for the tests)
// Prints one line per document ("ok FILE#N Kind/name" or "FAIL ...: reason"),
// exits 0 when every document passes, 1 when one fails, 2 on usage errors.

import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import * as k8s from "@kubernetes/client-node/dist/gen/models/all.js";

const here = dirname(fileURLToPath(import.meta.url));
const cwd = process.cwd();

// --- apiVersion/kind -> the two generated models --------------------------------

function splitApiVersion(apiVersion) {
        const i = apiVersion.lastIndexOf("/");
        return i < 0 ? { group: "", version: apiVersion }
                     : { group: apiVersion.slice(0, i), version: apiVersion.slice(i + 1) };
}

// kubernetes-models: one module per group/version ("kubernetes-models/apps/v1",
// the core group is "kubernetes-models/v1"), one class per kind.
async function schemaModel(apiVersion, kind) {
        const { group, version } = splitApiVersion(apiVersion);
        const mod = group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`;
        let m;
        try {
                m = await import(mod);
        } catch {
                return null;
        }
        const cls = m[kind];
        return cls && cls.apiVersion === apiVersion && cls.kind === kind ? cls : null;
}

// @kubernetes/client-node names its classes <Version><Kind> (V1DaemonSet,
// V1DeviceClass); a few kinds that exist in several groups carry the group
// too (RbacV1Subject, ResourceV1ResourceClaim).
function fieldModelName(apiVersion, kind) {
        const { group, version } = splitApiVersion(apiVersion);
        const v = version[0].toUpperCase() + version.slice(1);
        const g = group.split(".")[0];
        const grouped = (g ? g[0].toUpperCase() + g.slice(1) : "Core") + v + kind;
        if (k8s[grouped]?.getAttributeTypeMap)
                return grouped;
        return k8s[v + kind]?.getAttributeTypeMap ? v + kind : null;
}

// --- strict field check ------------------------------------------------------------

function pathJoin(path, key) {
        if (typeof key === "number")
                return `${path}[${key}]`;
        return path ? `${path}.${key}` : key;
}

// Walks |value| along the generated type |type| and reports every field the
// type does not declare. Types are those of the generated TypeScript models:
// "string", "number", "boolean", "Date", "any", "object", "IntOrString",
// "Array<T>", "{ [key: string]: T; }" or a model class name.
function unknownFields(value, type, path, out) {
        if (value === null || value === undefined)
                return;
        let m;
        if ((m = /^Array<(.+)>$/.exec(type))) {
                if (Array.isArray(value))
                        value.forEach((v, i) => unknownFields(v, m[1], pathJoin(path, i), out));
                return;
        }
        if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
                if (value && typeof value === "object" && !Array.isArray(value))
                        for (const [k, v] of Object.entries(value))
                                unknownFields(v, m[1], pathJoin(path, k), out);
                return;
        }
        const cls = k8s[type];
        if (!cls?.getAttributeTypeMap || typeof value !== "object" || Array.isArray(value))
                return; // a scalar or free-form type: the schema check covers it
        const attrs = new Map(cls.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
        for (const [k, v] of Object.entries(value)) {
                if (!attrs.has(k))
                        out.push(`${pathJoin(path, k)}: unknown field "${k}" (not in ${type})`);
                else
                        unknownFields(v, attrs.get(k), pathJoin(path, k), out);
        }
}

// --- API-server checks beyond the schema --------------------------------------------

function podTemplateOf(obj) {
        if (["DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"].includes(obj.kind))
                return obj.spec?.template;
        return null;
}

function workloadChecks(obj, out) {
        const tpl = podTemplateOf(obj);
        if (!tpl)
                return;
        const want = obj.spec?.selector?.matchLabels ?? {};
        const have = tpl.metadata?.labels ?? {};
        for (const [k, v] of Object.entries(want))
                if (have[k] !== v)
                        out.push(`spec.selector.matchLabels.${k}: "${v}" does not match the ` +
                                 `pod template's labels (the API server rejects this)`);
        const pod = tpl.spec ?? {};
        const volumes = new Set((pod.volumes ?? []).map((v) => v.name));
        const names = new Set();
        for (const [field, list] of [["initContainers", pod.initContainers],
                                     ["containers", pod.containers]]) {
                (list ?? []).forEach((c, i) => {
                        const p = `spec.template.spec.${field}[${i}]`;
                        if (names.has(c.name))
                                out.push(`${p}.name: duplicate container name "${c.name}"`);
                        names.add(c.name);
                        (c.volumeMounts ?? []).forEach((vm, j) => {
                                if (!volumes.has(vm.name))
                                        out.push(`${p}.volumeMounts[${j}].name: no volume ` +
                                                 `named "${vm.name}" in the pod`);
                        });
                });
        }
}

// --- documents ---------------------------------------------------------------------

function label(doc) {
        const name = doc.obj?.metadata?.name ?? "?";
        return `${doc.file}#${doc.index} ${doc.obj?.kind ?? "?"}/${name}`;
}

function loadFiles(files) {
        const docs = [];
        const errors = [];
        for (const file of files) {
                const shown = relative(cwd, file) || file;
                let text;
                try {
                        text = readFileSync(file, "utf8");
                } catch (e) {
                        errors.push(`FAIL ${shown}: ${e.message}`);
                        continue;
                }
                let index = 0;
                for (const d of parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true })) {
                        index++;
                        if (d.errors.length) {
                                errors.push(`FAIL ${shown}#${index}: YAML: ` +
                                            d.errors.map((e) => e.message).join("; "));
                                continue;
                        }
                        const obj = d.toJS();
                        if (obj === null || obj === undefined)
                                continue; // an empty document (a trailing ---)
                        docs.push({ file: shown, index, obj });
                }
        }
        return { docs, errors };
}

async function validateDoc(doc) {
        const obj = doc.obj;
        const problems = [];
        if (!obj || typeof obj !== "object" || Array.isArray(obj))
                return ["not a mapping"];
        if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string")
                return ["apiVersion and kind must be strings"];
        if (!obj.metadata?.name)
                problems.push("metadata.name: required");
        const Model = await schemaModel(obj.apiVersion, obj.kind);
        if (!Model)
                return [...problems, `unknown apiVersion/kind ${obj.apiVersion} ${obj.kind} ` +
                        `(not in kubernetes-models)`];
        try {
                new Model(obj).validate();
        } catch (e) {
                for (const line of String(e.message).split(/,\s*(?=data)/))
                        problems.push(`schema: ${line.replace(/^data\/?/, "/")}`);
        }
        const fm = fieldModelName(obj.apiVersion, obj.kind);
        if (!fm)
                problems.push(`no field model for ${obj.apiVersion} ${obj.kind} ` +
                              `in @kubernetes/client-node: cannot check fields strictly`);
        else
                unknownFields(obj, fm, "", problems);
        workloadChecks(obj, problems);
        return problems;
}

const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
                                "PriorityClass", "CustomResourceDefinition", "Node"]);

// References between documents: only for objects that this set of files
// defines itself (a reference to a namespace or object defined elsewhere, such
// as kube-system, is not checked).
function crossChecks(docs, report) {
        const key = (kind, ns, name) => `${kind}/${ns ?? ""}/${name}`;
        const have = new Set(docs.map((d) => key(d.obj.kind, CLUSTER_SCOPED.has(d.obj.kind)
                ? "" : d.obj.metadata?.namespace, d.obj.metadata?.name)));
        const namespaces = new Set(docs.filter((d) => d.obj.kind === "Namespace")
                                       .map((d) => d.obj.metadata.name));
        for (const d of docs) {
                const o = d.obj;
                const ns = o.metadata?.namespace;
                const add = (msg) => report(d, msg);
                if (CLUSTER_SCOPED.has(o.kind)) {
                        if (ns)
                                add(`metadata.namespace: ${o.kind} is cluster-scoped`);
                } else if (!ns) {
                        add("metadata.namespace: required here (a namespaced object would " +
                            "land in the current namespace)");
                } else if (namespaces.size && !namespaces.has(ns)) {
                        add(`metadata.namespace: "${ns}" is not one of the Namespaces defined ` +
                            `(${[...namespaces].join(", ")})`);
                }
                const pod = podTemplateOf(o)?.spec;
                if (pod) {
                        const sa = pod.serviceAccountName;
                        if (sa && sa !== "default" && !have.has(key("ServiceAccount", ns, sa)))
                                add(`spec.template.spec.serviceAccountName: no ServiceAccount ` +
                                    `${ns}/${sa} defined`);
                        (pod.volumes ?? []).forEach((v, i) => {
                                const cm = v.configMap?.name;
                                if (cm && !v.configMap.optional &&
                                    !have.has(key("ConfigMap", ns, cm)))
                                        add(`spec.template.spec.volumes[${i}].configMap.name: ` +
                                            `no ConfigMap ${ns}/${cm} defined`);
                        });
                }
                if (o.kind === "ClusterRoleBinding" || o.kind === "RoleBinding") {
                        const r = o.roleRef;
                        if (r?.kind === "ClusterRole" && !have.has(key("ClusterRole", "", r.name)))
                                add(`roleRef.name: no ClusterRole "${r.name}" defined`);
                        (o.subjects ?? []).forEach((s, i) => {
                                if (s.kind === "ServiceAccount" &&
                                    !have.has(key("ServiceAccount", s.namespace, s.name)))
                                        add(`subjects[${i}]: no ServiceAccount ` +
                                            `${s.namespace}/${s.name} defined`);
                        });
                }
        }
}

function dump(docs) {
        const containers = [];
        const configMaps = [];
        const deviceClasses = [];
        for (const d of docs) {
                const pod = podTemplateOf(d.obj)?.spec;
                for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])])
                        containers.push({ document: label(d), workload: d.obj.metadata?.name,
                                          name: c.name, image: c.image,
                                          command: c.command ?? [], args: c.args ?? [],
                                          env: c.env ?? [],
                                          securityContext: c.securityContext ?? {},
                                          volumeMounts: c.volumeMounts ?? [],
                                          volumes: pod?.volumes ?? [],
                                          affinity: pod?.affinity ?? {} });
                if (d.obj.kind === "ConfigMap")
                        configMaps.push({ document: label(d), name: d.obj.metadata?.name,
                                          data: d.obj.data ?? {} });
                if (d.obj.kind === "DeviceClass")
                        deviceClasses.push({ document: label(d), name: d.obj.metadata?.name,
                                             selectors: d.obj.spec?.selectors ?? [] });
        }
        process.stdout.write(JSON.stringify({ containers, configMaps, deviceClasses }, null, 1) +
                             "\n");
}

async function main(argv) {
        let wantDump = false;
        const files = [];
        for (const a of argv) {
                if (a === "--dump")
                        wantDump = true;
                else if (a === "-h" || a === "--help") {
                        process.stdout.write("usage: node validate.mjs [--dump] [FILE.yaml...]\n");
                        return 0;
                } else if (a.startsWith("-")) {
                        process.stderr.write(`validate.mjs: unknown option ${a}\n`);
                        return 2;
                } else
                        files.push(resolve(a));
        }
        if (!files.length) {
                const dir = join(here, "..", "kubernetes");
                for (const f of readdirSync(dir).sort())
                        if (f.endsWith(".yaml") || f.endsWith(".yml"))
                                files.push(join(dir, f));
        }
        if (!files.length) {
                process.stderr.write("validate.mjs: no manifests\n");
                return 2;
        }
        const { docs, errors } = loadFiles(files);
        if (wantDump) {
                errors.forEach((e) => process.stderr.write(e + "\n"));
                dump(docs);
                return errors.length ? 1 : 0;
        }
        const problems = new Map(docs.map((d) => [d, []]));
        for (const d of docs)
                problems.get(d).push(...await validateDoc(d));
        crossChecks(docs, (d, msg) => problems.get(d).push(msg));
        let failed = errors.length;
        errors.forEach((e) => console.log(e));
        for (const d of docs) {
                const p = problems.get(d);
                if (!p.length) {
                        console.log(`ok   ${label(d)} (${d.obj.apiVersion})`);
                        continue;
                }
                failed++;
                console.log(`FAIL ${label(d)} (${d.obj.apiVersion})`);
                p.forEach((m) => console.log(`     ${m}`));
        }
        console.log(`${docs.length} documents in ${files.length} files: ` +
                    (failed ? `${failed} failed` : "all valid"));
        return failed ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
