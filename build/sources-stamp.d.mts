export declare const sourceRoots: readonly string[];
export declare const stampFileName: string;
export declare function sourcesStamp(repoRoot: string): string;
