import { describe, expect, it } from "vitest";
import type { Host } from "../api/types";
import { cordonDetail, cordonLabel, faultWords, uncordonDone } from "./hostCordon";

const host = (fields: Partial<Host>) => ({ name: "gpu-a", cordon_reason: null, cordon_cause: null, faults: [], warnings: [], ...fields }) as Host;
const ecc = { kind: "ecc_uncorrected", device: 1, detail: "uncorrectable ECC errors (3)", count: 3 } as const;

describe("a host's cordon, as strata hosts words it", () => {
  it("names a fault by its GPU or path", () => {
    expect(faultWords(ecc)).toBe("GPU 1: uncorrectable ECC errors (3)");
    expect(faultWords({ kind: "disk_space", path: "/data", detail: "200 MiB free, below 1 GiB" })).toBe("/data: 200 MiB free, below 1 GiB");
    expect(faultWords({ kind: "clock_offset", detail: "clock 95s ahead" })).toBe("clock 95s ahead");
  });

  it("labels only a cordoned host, with its reason and what cordoned it", () => {
    expect(cordonLabel(host({}))).toBeNull();
    const cordoned = host({ cordon_reason: "GPU 1: uncorrectable ECC errors (3)", cordon_cause: "fault", faults: [ecc] });
    expect(cordonLabel(cordoned)).toBe("cordoned: GPU 1: uncorrectable ECC errors (3)");
    expect(cordonDetail(cordoned)).toContain("cordoned by a fault");
    expect(cordonDetail(cordoned)).toContain("Faults now: GPU 1: uncorrectable ECC errors (3)");
  });

  it("says which faults a cleared host still reports", () => {
    expect(uncordonDone(host({}))).toBe("gpu-a takes tasks again.");
    expect(uncordonDone(host({ faults: [ecc] }))).toContain("acknowledged: GPU 1");
  });
});
