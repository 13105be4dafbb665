/* fold_opts.c - colossal-fold's command line. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "fold.h"

void fold_usage(FILE *f)
{
    fprintf(f,
            "usage: " FOLD_PROG " [options] PARAMS PROTEIN.fasta\n"
            "Predicts protein structures with an AlphaFold2 monomer model (no templates). PARAMS is one of\n"
            "DeepMind's parameter files (params_model_3.npz .. params_model_5_ptm.npz) or a directory of them\n"
            "(every model without templates in it runs). PROTEIN.fasta holds one or several sequences; each gives\n"
            "a PDB file with the per-residue pLDDT in the B-factor column, and for _ptm models NAME_scores.json\n"
            "(ColabFold's layout: plddt, pae, max_pae, ptm).\n"
            "  -o, --out PATH        the output file (one sequence) or directory (several; created if needed);\n"
            "                        default: NAME.pdb in the current directory, NAME the record's first word\n"
            "      --msa FILE.a3m    a precomputed MSA (a3m: lower-case letters are insertions, '-' gaps; its first\n"
            "                        row is the query); default: single-sequence mode\n"
            "      --recycles N      extra passes after the first, as AlphaFold's num_recycle (default 3)\n"
            "      --chunk-size N|auto|none  rows per chunk in the attention, triangle, transition and outer\n"
            "                        product modules: smaller chunks need less memory (default auto: the largest\n"
            "                        that fits the memory budget)\n"
            "      --max-msa-clusters N  MSA rows the Evoformer sees (default 512); the rest form the extra MSA\n"
            "      --max-extra-msa N     extra MSA rows kept (default: 5120, 1024 for model_5, as AlphaFold)\n"
            "      --cif             write mmCIF instead of PDB\n"
            "      --json            print a JSON summary (pLDDT per residue, pTM, timings) on stdout\n"
            "      --force           replace existing output files\n"
            "  -q, --quiet           no progress lines\n"
            "%s"
            "      --cpu-mem SIZE    host memory for the weights (default unlimited)\n"
            "      --gpu-mem SIZE    the GPU's budget for weights moving in and out (default: most of its free memory)\n"
            "  -h, --help            print this help and exit; --version: print the version and exit\n"
            "%s",
            app_device_help, cli_exit_help);
}

#define bad cli_bad
#define to_ll cli_to_ll

int fold_parse(int argc, char **argv, fold_opts *o, char *msg, size_t n)
{
    enum { O_MSA = 256, O_RECYCLES, O_CHUNK, O_CIF, O_JSON, O_FORCE, O_DEVICE, O_CLUSTERS, O_EXTRA, O_CPU, O_GPU, O_VERSION };
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"msa", required_argument, 0, O_MSA},
        {"recycles", required_argument, 0, O_RECYCLES}, {"chunk-size", required_argument, 0, O_CHUNK},
        {"cif", no_argument, 0, O_CIF}, {"json", no_argument, 0, O_JSON}, {"force", no_argument, 0, O_FORCE},
        {"device", required_argument, 0, O_DEVICE}, {"max-msa-clusters", required_argument, 0, O_CLUSTERS},
        {"max-extra-msa", required_argument, 0, O_EXTRA}, {"cpu-mem", required_argument, 0, O_CPU},
        {"gpu-mem", required_argument, 0, O_GPU}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, O_VERSION}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->recycles = 3;
    o->chunk = -1;
    o->max_msa_clusters = 512;
    o->max_extra_msa = -1;  /* the model's own: 5120, 1024 for model_5 */
    int c;
    long long v;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        switch (c) {
        case 'h': fold_usage(stdout); return 1;
        case O_VERSION: cli_print_version(FOLD_PROG); return 1;
        case 'o':
            if (!*optarg) return bad(msg, n, "--out needs a path");
            o->out = optarg;
            break;
        case 'q': o->quiet = true; break;
        case O_MSA:
            if (!*optarg) return bad(msg, n, "--msa needs a file");
            o->msa = optarg;
            break;
        case O_RECYCLES:
            if (!to_ll(optarg, 0, 100, &v)) return bad(msg, n, "--recycles must be an integer in 0..100 (got '%s')", optarg);
            o->recycles = (int)v;
            break;
        case O_CHUNK:
            if (strcmp(optarg, "auto") == 0) o->chunk = -1;
            else if (strcmp(optarg, "none") == 0) o->chunk = 0;
            else if (to_ll(optarg, 1, 1 << 20, &v)) o->chunk = v;
            else return bad(msg, n, "--chunk-size must be a positive integer, auto or none (got '%s')", optarg);
            break;
        case O_CLUSTERS:
            if (!to_ll(optarg, 1, 100000, &v))
                return bad(msg, n, "--max-msa-clusters must be an integer in 1..100000 (got '%s')", optarg);
            o->max_msa_clusters = (int)v;
            break;
        case O_EXTRA:
            if (!to_ll(optarg, 0, 1000000, &v))
                return bad(msg, n, "--max-extra-msa must be an integer in 0..1000000 (got '%s')", optarg);
            o->max_extra_msa = (int)v;
            break;
        case O_CIF: o->cif = true; break;
        case O_JSON: o->json = true; break;
        case O_FORCE: o->force = true; break;
        case O_DEVICE:
            if (!app_device_parse(optarg, &o->device, msg, n)) return 2;
            break;
        case O_CPU:
        case O_GPU: {
            char m2[256];
            int r = mem_opt_set(&o->mem, c == O_CPU ? "cpu-mem" : "gpu-mem", optarg, m2, sizeof m2);
            if (r != 1) return bad(msg, n, "%s", m2);
            break;
        }
        case ':': return bad(msg, n, "%s needs a value", argv[optind - 1]);
        default: {
            char line[512];
            return bad(msg, n, "%s", cli_unknown_option(argv[optind - 1], opts, line, sizeof line));
        }
        }
    }
    if (argc - optind != 2) return bad(msg, n, "expected PARAMS and PROTEIN.fasta (got %d arguments)", argc - optind);
    o->params = argv[optind];
    o->fasta = argv[optind + 1];
    return 0;
}
